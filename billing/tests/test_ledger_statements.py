"""Ledger writes cost the same number of statements whatever the size of the fleet: a unit
reaching Running, leaving it, and the hourly seal of a meter."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from billing import ledger, periods
from billing.models import Meter, QuantityUnit, UsageRecord
from catalog.tests.factories import PackageFactory
from runtime import lifecycle
from runtime.models import GPUUnit, UnitPhase
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
    """Statements of a unit's transition to Running and of its transition out of it."""
    unit = UnitFactory(tenant=tenant, name=name, package=package, phase=UnitPhase.PENDING)
    with recording() as opened:
        assert lifecycle.transition_unit(unit, to=UnitPhase.RUNNING, reason="Running", dra=DRA)
    with recording() as closed:
        assert lifecycle.transition_unit(unit, to=UnitPhase.FAILED, reason="DeviceUnhealthy")
    assert UsageRecord.objects.filter(unit_uid=unit.uid).count() == 1
    return len(opened.statements), len(closed.statements)


def test_opening_and_closing_a_meter_cost_the_same_in_a_small_and_a_large_fleet(tenant):
    package = PackageFactory(article=True, price="0.36")
    fleet(tenant, 5)
    small = one_run(tenant, package, "small")
    fleet(tenant, 1_000)
    large = one_run(tenant, package, "large")
    assert small == large
    # Opening: the phase, its timeline entry (a new phase: appended without reading the
    # latest), is a meter open, open one.
    # Closing: the phase, the timeline, and the meter: lock it, prices, the rows, delete it.
    assert small == (4, 6)


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
    assert small_statements == large_statements == 4  # meters, prices, rows, move them on
    assert (small_written, large_written) == (10, 1_000)


def test_a_unit_seen_running_without_a_meter_gets_one_from_the_reconcile(tenant, caplog):
    package = PackageFactory(article=True, price="0.36")
    unit = UnitFactory(tenant=tenant, name="missed", package=package, phase=UnitPhase.RUNNING)
    gone = UnitFactory(tenant=tenant, name="gone", package=package, phase=UnitPhase.STOPPED)
    earlier = periods.floor_hour(timezone.now()) - timedelta(minutes=30)
    ledger.open_meter(lifecycle.holding(gone, dra=DRA), at=earlier)
    Meter.objects.filter(unit_uid=gone.uid).update(seen_at=earlier + timedelta(minutes=2))
    opened, closed = lifecycle.reconcile_meters(
        list(GPUUnit.objects.filter(tenant=tenant)), seen_at=timezone.now()
    )
    assert (opened, closed) == (1, 1)
    assert Meter.objects.filter(unit_uid=unit.uid).exists()
    (row,) = UsageRecord.objects.filter(unit_uid=gone.uid)
    # Closed when it was last seen Running, not when the reconcile noticed.
    assert (row.start, row.end) == (earlier, earlier + timedelta(minutes=2))
    assert "had no open meter" in caplog.text
    assert "last seen running" in caplog.text
