"""The usage audit's arithmetic (pure) and the command over planted differences: the ledger
against the timelines, and the meters against the pods a development cluster runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from billing import ledger
from billing.models import Meter, UsageRecord
from billing.tests.helpers import holding, priced
from catalog.tests.factories import PackageFactory
from runtime import lifecycle, usage_audit
from runtime.control import metering
from runtime.models import UnitPhase
from runtime.tests.factories import UnitFactory
from runtime.tests.helpers import order_unit, remove_namespace_objects, wait_for_phase, wait_until
from tests.endpoints import client_for

T0 = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)


def t(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_merged_joins_touching_and_overlapping_intervals_and_drops_empty_ones():
    assert usage_audit.merged([(t(5), t(6)), (t(0), t(2)), (t(2), t(3)), (t(4), t(4))]) == [
        (t(0), t(3)),
        (t(5), t(6)),
    ]


def test_only_in_is_what_one_side_has_that_the_other_has_not():
    held = [(t(0), t(10)), (t(20), t(30))]
    billed = [(t(0), t(10)), (t(25), t(40))]
    assert usage_audit.only_in(held, billed) == timedelta(minutes=5)
    assert usage_audit.only_in(billed, held) == timedelta(minutes=10)


def test_held_intervals_pair_starts_and_ends_and_run_on_until_now():
    entries = [
        ("UsageStarted", t(0)),
        ("UsageStarted", t(0)),  # a duplicate start changes nothing
        ("UsageEnded", t(10)),
        ("UsageEnded", t(11)),  # an end without a start neither
        ("UsageStarted", t(20)),
    ]
    assert usage_audit.held_intervals(entries, now=t(50)) == [(t(0), t(10)), (t(20), t(50))]


@pytest.mark.django_db
def test_the_audit_finds_a_planted_difference_and_the_command_reports_it(tenant, capsys):
    package = priced("h100-2x", "3.60")
    unit = UnitFactory(tenant=tenant, name="audited", package=package, phase=UnitPhase.STOPPED)
    # What the reconcile writes for a pod that ran 10:00-11:00.
    ledger.open_meter(holding(unit, pod_uid="p1"), at=t(0))
    lifecycle.append_event(unit, reason="UsageStarted", observed_at=t(0))
    ledger.close_meter(unit.uid, at=t(60))
    lifecycle.append_event(unit, reason="UsageEnded", observed_at=t(60))
    window = ["--from", t(-60).isoformat(), "--to", t(120).isoformat()]
    assert usage_audit.audit(t(-60), t(120), now=t(200)) == []
    call_command("audit_usage", *window)
    assert "0 difference(s)" in capsys.readouterr().out

    # Planted: the ledger loses the last ten minutes.
    last = UsageRecord.objects.get(unit_uid=unit.uid)
    UsageRecord.objects.filter(pk=last.pk).update(end=t(50))

    (difference,) = usage_audit.audit(t(-60), t(120), now=t(200))
    assert difference.unit_name == "audited"
    assert difference.unbilled == timedelta(minutes=10)
    assert difference.overbilled == timedelta(0)
    with pytest.raises(CommandError):
        call_command("audit_usage", *window)
    assert "audited" in capsys.readouterr().out


def test_pod_difference_finds_unbilled_other_pod_and_other_start():
    assert usage_audit.pod_difference("u", "n", "p1", t(0), ("p1", t(0))) is None
    assert "no meter" in usage_audit.pod_difference("u", "n", "p1", t(0), None).why
    assert "follows pod p0" in usage_audit.pod_difference("u", "n", "p1", t(0), ("p0", t(0))).why
    late = usage_audit.pod_difference("u", "n", "p1", t(0), ("p1", t(3)))
    assert late is not None
    assert late.billed_since == t(3)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_worker")
def test_the_audit_compares_the_meters_with_the_pods_the_cluster_runs(tenant, cluster, capsys):
    """Issue 40: a meter closed while its pod still holds its devices (the hole a container
    exit opened) is what the timeline cannot show; the cluster can."""
    client = client_for(tenant)
    unit = wait_for_phase(order_unit(client, "audited-live", PackageFactory().id), "Running")
    wait_until(lambda: Meter.objects.filter(unit_uid=unit.uid).exists(), "meter open")
    try:
        held = metering.held_in_cluster(unit.cluster)
        assert [(uid, name) for uid, name, *_ in held] == [(str(unit.uid), "audited-live")]
        assert usage_audit.audit_pods(held) == []

        # Planted: the meter closes while the pod runs on.
        ledger.close_meter(unit.uid, at=timezone.now())

        (found,) = usage_audit.audit_pods(metering.held_in_cluster(unit.cluster))
        assert (found.unit_name, found.billed_since) == ("audited-live", None)
        with pytest.raises(CommandError):
            call_command("audit_usage")
        out = capsys.readouterr().out
        assert "audited-live" in out
        assert "no meter is open" in out
    finally:
        remove_namespace_objects(tenant.namespace)
