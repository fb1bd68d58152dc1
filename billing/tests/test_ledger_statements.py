"""Ledger writes cost the same number of statements whatever the size of the fleet: a unit
reaching Running, leaving it, and the hourly seal of a meter."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from billing import ledger, periods
from billing.models import Meter, QuantityUnit, UsageRecord
from billing.tests.helpers import claim_of, holding, pod_of
from catalog.tests.factories import PackageFactory
from runtime.control import metering
from runtime.models import UnitPhase
from runtime.tests.factories import UnitFactory
from tests.endpoints import recording

pytestmark = pytest.mark.django_db

DRA = {"allocated": True, "devices": [{"pool": "n", "device": "gpu-0"}]}


def fleet(tenant, size: int) -> None:
    """`size` other units being metered."""
    now = timezone.now()
    Meter.objects.bulk_create(
        Meter(
            unit_uid=uuid.uuid4(),
            unit_name=f"other-{i}",
            tenant=tenant,
            package_id="p",
            quantity_unit=QuantityUnit.DEVICE_SECONDS,
            count=1,
            opened_at=now,
            started_at=now,
            seen_at=now,
        )
        for i in range(size)
    )


def one_run(tenant, package, name: str) -> tuple[int, int]:
    """Statements of metering a unit whose pod the reconcile saw start, then end."""
    unit = UnitFactory(tenant=tenant, name=name, package=package, phase=UnitPhase.RUNNING)
    # Within the last hour that has ended, so that the run is one ledger row whenever the test
    # runs (a run across an hour's boundary is two).
    started = periods.floor_hour(timezone.now()) - timedelta(minutes=30)
    claim = claim_of(1)
    with recording() as opened:
        assert metering.settle_meters(
            [(unit, claim, pod_of("p1", started), None)], backstop=False
        ) == (1, 0)
    ended = pod_of("p1", started, started + timedelta(minutes=2))
    with recording() as closed:
        assert metering.settle_meters([(unit, claim, ended, None)], backstop=False) == (0, 1)
    assert UsageRecord.objects.filter(unit_uid=unit.uid).count() == 1
    return len(opened.statements), len(closed.statements)


def test_opening_and_closing_a_meter_cost_the_same_in_a_small_and_a_large_fleet(tenant):
    package = PackageFactory(article=True, price="0.36")
    fleet(tenant, 5)
    small = one_run(tenant, package, "small")
    fleet(tenant, 1_000)
    large = one_run(tenant, package, "large")
    assert small == large
    # Opening: the open meters, the pods metered before, where the unit's last record ended,
    # the meter and its pod, the timeline, seen now. Closing: the open meters, then lock it,
    # prices, the rows already there, the new rows, the rollups (per unit and per package:
    # insert the missing, lock, update), delete it, its pod's end, the timeline.
    assert small == (7, 14)


def test_the_hourly_seal_costs_the_same_for_ten_or_a_thousand_meters(tenant):
    # Half an hour before this hour began: one row per meter to seal (one clock reading, so
    # that no hour boundary passes between the meters' start and the seal).
    now = timezone.now()
    hour_ago = periods.floor_hour(now) - timedelta(minutes=30)

    def seal(size: int) -> tuple[int, int]:
        Meter.objects.all().delete()
        fleet(tenant, size)
        Meter.objects.update(started_at=hour_ago, opened_at=hour_ago)
        with recording() as log:
            written = ledger.seal_meters(now=now)
        assert not Meter.objects.filter(started_at=hour_ago).exists()
        return len(log.statements), written

    small_statements, small_written = seal(10)
    large_statements, large_written = seal(1_000)
    # meters, prices, rows already there, rows, six for the rollups, move them on
    assert small_statements == large_statements == 11
    assert (small_written, large_written) == (10, 1_000)


def test_a_reconcile_meters_a_pod_from_its_start_and_dates_an_unobserved_end(tenant, caplog):
    package = PackageFactory(article=True, price="0.36")
    unit = UnitFactory(tenant=tenant, name="missed", package=package, phase=UnitPhase.RUNNING)
    gone = UnitFactory(tenant=tenant, name="gone", package=package, phase=UnitPhase.STOPPED)
    earlier = periods.floor_hour(timezone.now()) - timedelta(minutes=30)
    ledger.open_meter(holding(gone, DRA, pod_uid="old"), at=earlier)
    ledger.mark_seen([gone.uid], at=earlier + timedelta(minutes=2))

    # The observer after a relist: `missed`'s pod runs since `earlier` (its start event was
    # missed), `gone`'s pod is gone and no watch saw its last state.
    opened, closed = metering.settle_meters(
        [(unit, claim_of(1), pod_of("p1", earlier), None), (gone, None, None, None)],
        backstop=False,
    )

    assert (opened, closed) == (1, 1)
    # Metered from when the cluster says the pod started, not when the reconcile saw it.
    assert Meter.objects.get(unit_uid=unit.uid).started_at == earlier
    (row,) = UsageRecord.objects.filter(unit_uid=gone.uid)
    # Closed when it was last seen running, not when the reconcile noticed; its timeline says so.
    assert (row.start, row.end) == (earlier, earlier + timedelta(minutes=2))
    event = gone.events.get(reason="UsageEndEstimated")
    assert "last seen running" in event.message
