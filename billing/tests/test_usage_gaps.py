"""Ends seen late are billed to the times the cluster reports, not to when the control plane
noticed: a restart while the observer was down (no watch saw the old pod go) is billed until the
new pod was created, and the new pod from when it started; a pod gone without any trace is
billed until it was last seen running, and the timeline says so."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from billing.models import Meter, UsageRecord
from billing.tests.helpers import package
from controlplane import kube
from runtime import lifecycle, manifests
from runtime.control import reconcile
from runtime.control.metering import settle_meters
from runtime.control.observer import Observer
from runtime.control.status import held_since, k8s_time
from runtime.models import GPUUnit, UnitPhase
from runtime.tests.helpers import order_unit, wait_for_phase, wait_until
from runtime.tests.test_observer import running
from tests.endpoints import client_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker", "audited_stack"),
]

PACKAGE = "gpu-rtx3080-2x-cpu10-mem40g"


def _pod(unit: GPUUnit) -> dict | None:
    return kube.get(kube.POD, unit.namespace, manifests.pod_name_for(unit.name))


def _clock_past(moment: datetime | None) -> None:
    """Wait until the clock (the simulated cluster's and PostgreSQL's: this host's) is a
    second past `moment`, so what happens next has a later cluster time."""
    assert moment is not None
    wait_until(
        lambda: timezone.now() >= moment + timedelta(seconds=1),
        f"the clock a second past {moment.isoformat()}",
    )


def _meter_pod(unit: GPUUnit) -> str | None:
    return Meter.objects.filter(unit_uid=unit.uid).values_list("pod_uid", flat=True).first()


def test_a_restart_while_the_observer_is_down_is_billed_to_the_times_the_cluster_reports(
    tenant,
) -> None:
    package(article=True, price="0.36")
    client = client_for(tenant)
    observer = Observer()
    thread = running(observer)
    try:
        unit = wait_for_phase(order_unit(client, "gapped", PACKAGE), UnitPhase.RUNNING)
        first = _pod(unit)
        assert first is not None
        wait_until(lambda: _meter_pod(unit) == first["metadata"]["uid"], "first pod metered")
        # It runs into a later whole second (the cluster's times are whole seconds).
        _clock_past(Meter.objects.get(unit_uid=unit.uid).started_at)
    finally:
        observer.stop()
        thread.join(10)

    # While no observer watches, the unit is restarted: its pod replaced by a new one.
    response = client.post(
        f"/api/v1/gpu-units/{unit.name}/restart", {"operationID": "restart-1"}, format="json"
    )
    assert response.status_code == 202, response.json()
    second = wait_until(
        lambda: (
            (pod := _pod(unit))
            and pod["metadata"]["uid"] != first["metadata"]["uid"]
            and held_since(pod, kube.get(kube.RESOURCECLAIM, unit.namespace, unit.claim_name))
            and pod
        ),
        "the new pod running",
    )
    # The observer comes back after the new pod's start, in a later whole second.
    _clock_past(held_since(second, kube.get(kube.RESOURCECLAIM, unit.namespace, unit.claim_name)))

    observer = Observer()
    thread = running(observer)
    try:
        wait_until(lambda: _meter_pod(unit) == second["metadata"]["uid"], "new pod metered")
    finally:
        observer.stop()
        thread.join(10)

    row = UsageRecord.objects.filter(unit_uid=unit.uid).latest("end")
    # The old pod was gone when the new one was created: billed until then, not until the
    # observer came back; the new pod from when it started.
    assert row.end == k8s_time(second["metadata"]["creationTimestamp"])
    meter = Meter.objects.get(unit_uid=unit.uid)
    claim = kube.get(kube.RESOURCECLAIM, unit.namespace, unit.claim_name)
    assert meter.started_at == held_since(second, claim)
    assert meter.started_at >= row.end
    estimated = unit.events.get(reason="UsageEndEstimated")
    assert "a newer pod of the unit was created" in estimated.message


def test_a_pod_gone_without_trace_is_billed_until_it_was_last_seen_running(tenant) -> None:
    package(article=True, price="0.36")
    client = client_for(tenant)
    unit = wait_for_phase(order_unit(client, "vanished", PACKAGE), UnitPhase.RUNNING)
    wait_until(lambda: _meter_pod(unit), "pod metered")
    reconcile.reconcile_units()  # beat's pass sees the pod running
    seen = Meter.objects.get(unit_uid=unit.uid).seen_at
    assert seen > Meter.objects.get(unit_uid=unit.uid).started_at

    # The observer's view after a relist in which the pod is simply absent.
    assert settle_meters([(unit, None, None, None)], backstop=False) == (0, 1)

    row = UsageRecord.objects.filter(unit_uid=unit.uid).latest("end")
    assert row.end == seen
    assert "last seen running" in unit.events.get(reason="UsageEndEstimated").message


def test_a_meter_closes_with_its_timeline_entry_or_not_at_all(tenant, monkeypatch) -> None:
    """A process killed (here: failing) between closing a meter and writing the UsageEnded
    entry leaves the meter open, to be closed again by the next pass: the ledger never bills
    what the timeline does not explain (the usage audit reads the timeline)."""
    package(article=True, price="0.36")
    client = client_for(tenant)
    unit = wait_for_phase(order_unit(client, "interrupted", PACKAGE), UnitPhase.RUNNING)
    wait_until(lambda: _meter_pod(unit), "pod metered")
    reconcile.reconcile_units()  # beat's pass sees the pod running

    def killed(*args, **kwargs):
        raise RuntimeError("killed between the close and its timeline entry")

    with monkeypatch.context() as patched:
        patched.setattr(lifecycle, "append_event", killed)
        with pytest.raises(RuntimeError):
            settle_meters([(unit, None, None, None)], backstop=False)
    assert _meter_pod(unit) is not None
    assert not UsageRecord.objects.filter(unit_uid=unit.uid).exists()

    assert settle_meters([(unit, None, None, None)], backstop=False) == (0, 1)
    assert _meter_pod(unit) is None
    assert unit.events.filter(reason="UsageEnded").count() == 1
