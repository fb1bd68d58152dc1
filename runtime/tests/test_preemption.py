"""Interruptible units give way to on-demand ones (ARCHITECTURE §22), over the simulated
cluster and a real worker: the L40S node filled with interruptible units, an on-demand order
that needs half of it takes back exactly the two youngest with the package's notice, they end
Preempted (restartable), and the order lands on their devices."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from billing import prices
from billing.models import Meter, UsageRecord
from controlplane import kube
from inventory.sync import sync_inventory
from runtime import manifests
from runtime.control import preemption, reconcile
from runtime.models import GPUUnit, UnitPhase
from runtime.tests.helpers import (
    l40s_package,
    order_unit,
    remove_namespace_objects,
    wait_for_phase,
)
from tenancy import webhooks
from tenancy.models import WebhookDelivery
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def devices(unit: GPUUnit) -> set[str]:
    unit.refresh_from_db()
    return {d["device"] for d in unit.dra.get("devices") or []}


def test_an_on_demand_order_takes_back_the_fewest_youngest_interruptible_units(
    tenant, cluster, settings
):
    settings.PREEMPTION_WAIT_SECONDS = 0  # the scheduler has had its pass once it is Pending
    spot = l40s_package(
        "l40s-2x-spot",
        2,
        price="2.00",
        interruptible=True,
        interruptible_price="0.50",
        preemption_notice_seconds=1,
    )
    whole = l40s_package("l40s-4x", 4, price="4.00")
    other = TenantFactory()
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    # Nothing listens on port 9: the deliveries are written and refused, which is all this
    # test reads (tests/test_webhooks.py receives events).
    endpoint = webhooks.create_endpoint(
        tenant=tenant, url="http://127.0.0.1:9/hook", events=["unit.preempting"]
    )
    spot_client, client = client_for(tenant), client_for(other)
    intruder_namespace = f"intruder-{uuid.uuid4().hex[:8]}"
    kube.create(kube.NAMESPACE, None, {"metadata": {"name": intruder_namespace}})
    try:
        # The node's 8 L40S, taken by four interruptible units, oldest first.
        spots = [
            wait_for_phase(
                order_unit(
                    spot_client,
                    f"spot-{index}",
                    spot.id,
                    interruptible=True,
                    autoResume=index == 2,
                ),
                "Running",
            )
            for index in range(4)
        ]
        held = {unit.name: devices(unit) for unit in spots}
        sync_inventory()
        # Preemption serves a unit waiting for devices, once the scheduler said so.
        waiting = wait_for_phase(
            order_unit(client, "big", whole.id), "Pending", reason="NoMatchingDevices"
        )
        assert not waiting.dra.get("allocated")

        assert preemption.give_notice(now=timezone.now()) == 2
        for unit in spots:
            unit.refresh_from_db()
        told = {u.name: u.preemption for u in spots if u.preemption}
        assert sorted(told) == ["spot-2", "spot-3"]  # two are enough: the youngest two
        assert {p["reason"] for p in told.values()} == {"CapacityReclaimed"}
        assert {p["for"] for p in told.values()} == {str(waiting.uid)}
        shown = spot_client.get("/api/v1/gpu-units/spot-3").json()["data"]["preemption"]
        assert shown == {k: told["spot-3"][k] for k in ("reason", "noticeAt", "preemptAt")}
        assert spot_client.get("/api/v1/gpu-units/spot-0").json()["data"]["preemption"] is None
        queued = WebhookDelivery.objects.filter(endpoint=endpoint, event_type="unit.preempting")
        assert sorted(d.payload["data"]["name"] for d in queued) == ["spot-2", "spot-3"]
        assert preemption.give_notice(now=timezone.now()) == 0  # told once
        # The order shows what it waits for, and a reconcile keeps saying so.
        reconcile.reconcile_units()
        waiting.refresh_from_db()
        assert (waiting.phase, waiting.reason) == ("Pending", "WaitingForPreemption")
        assert "give way for it" in waiting.message

        # Someone else's claim for one L40S waits too (the node is full), and has waited
        # longer: the scheduler would try it first for a device the victims release.
        intruder = _intruding_claim(intruder_namespace)

        # Nothing is stopped before its notice runs out; then both are.
        notice_at = min(datetime.fromisoformat(p["noticeAt"]) for p in told.values())
        preempt_at = max(datetime.fromisoformat(p["preemptAt"]) for p in told.values())
        assert preempt_at - notice_at == timedelta(seconds=1)  # the package's notice
        assert preemption.carry_out(now=notice_at) == 0
        assert preemption.carry_out(now=preempt_at) == 2
        # Before they are stopped, their devices are handed over to the waiting unit: each
        # tainted NoSchedule for it alone, and its claim made again to ask for exactly them.
        freed = held["spot-2"] | held["spot-3"]
        waiting.refresh_from_db()
        assert waiting.handover["value"] == str(waiting.uid)
        assert {d["device"] for d in waiting.handover["devices"]} == freed
        rules = _handover_rules(waiting)
        assert {r["spec"]["deviceSelector"]["device"] for r in rules} == freed
        assert {(r["spec"]["taint"]["value"], r["spec"]["taint"]["effect"]) for r in rules} == {
            (str(waiting.uid), "NoSchedule")
        }
        for name in ("spot-2", "spot-3"):
            unit = wait_for_phase(GPUUnit.objects.get(name=name), "Preempted")
            assert unit.reason == "Preempted"
            # Billed at the interruptible price until its devices were released: the meter
            # closes once a reconcile sees the pod gone.
            wait_for_meter_closed(unit)
            rows = UsageRecord.objects.filter(unit_uid=unit.uid)
            assert {r.alternative for r in rows} == {prices.INTERRUPTIBLE}
        running = wait_for_phase(waiting, "Running")
        assert devices(running) == freed
        assert running.preemption_wait_until is None
        claim = kube.get(kube.RESOURCECLAIM, running.namespace, running.claim_name)
        assert claim["metadata"]["uid"] == running.claim_k8s_uid  # made again
        request = claim["spec"]["devices"]["requests"][0]["exactly"]
        assert request["tolerations"] == [
            {
                "key": "runtime.lokiwager.io/handover",
                "operator": "Equal",
                "value": str(waiting.uid),
                "effect": "NoSchedule",
            }
        ]
        pin = request["selectors"][-1]["cel"]["expression"]
        assert pin.count("GPU-") == len(freed)  # each device named by its uuid
        # The claim that waited longer got none of them.
        assert _allocation(intruder) is None
        # It holds them: the hand-over ends, and its taints go.
        assert preemption.settle_handovers(now=timezone.now()) == 1
        assert _handover_rules(waiting) == []
        running.refresh_from_db()
        assert running.handover == {}
        assert running.events.filter(reason="HandoverEnded").exists()
        assert _allocation(intruder) is None  # no device is free: the node is full again
        kube.delete(kube.POD, intruder_namespace, "intruder")
        kube.delete(kube.RESOURCECLAIM, intruder_namespace, "intruder")
        assert {u.name for u in GPUUnit.objects.filter(phase=UnitPhase.RUNNING)} == {
            "spot-0",
            "spot-1",
            "big",
        }

        # No room, nothing resumed: spot-2 (autoResume) waits Preempted.
        sync_inventory()
        assert preemption.resume() == 0
        # Once the big unit is gone, spot-2 is started again by the control plane and spot-3
        # by its owner.
        client.delete("/api/v1/gpu-units/big")
        wait_for_phase(running, "Terminated")
        sync_inventory()
        assert preemption.resume() == 1
        resumed = wait_for_phase(GPUUnit.objects.get(name="spot-2"), "Running")
        assert resumed.operations.filter(operation_id__startswith="@resume-").exists()
        started = spot_client.post(
            "/api/v1/gpu-units/spot-3/start", {"operationID": "again"}, format="json"
        )
        assert started.status_code == 202, started.json()
        again = wait_for_phase(GPUUnit.objects.get(name="spot-3"), "Running")
        assert again.preemption == {}
    finally:
        remove_namespace_objects(tenant.namespace)
        remove_namespace_objects(other.namespace)
        remove_namespace_objects(intruder_namespace)
        kube.delete(kube.NAMESPACE, None, intruder_namespace)
        kind = kube.device_taint_rule_kind()
        for rule in kube.list_objects(
            kind, label_selector=f"{manifests.LABEL_TENANT}={other.slug}"
        ):
            kube.delete(kind, None, rule["metadata"]["name"])


def _intruding_claim(namespace: str) -> tuple[str, str]:
    """A claim for one L40S and a pod that uses it, made by hand in `namespace`."""
    kube.create(
        kube.RESOURCECLAIM,
        namespace,
        {
            "metadata": {"name": "intruder"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": "nvidia-l40s", "count": 1}}
                    ]
                }
            },
        },
    )
    kube.create(
        kube.POD,
        namespace,
        {
            "metadata": {"name": "intruder"},
            "spec": {
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "intruder"}],
            },
        },
    )
    return namespace, "intruder"


def _allocation(claim: tuple[str, str]) -> dict | None:
    found = kube.get(kube.RESOURCECLAIM, *claim) or {}
    return (found.get("status") or {}).get("allocation")


def _handover_rules(unit: GPUUnit) -> list[dict]:
    return kube.list_objects(
        kube.device_taint_rule_kind(), label_selector=f"{manifests.LABEL_HANDOVER}={unit.uid}"
    )


def wait_for_meter_closed(unit: GPUUnit, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while Meter.objects.filter(unit_uid=unit.uid).exists():
        assert time.monotonic() < deadline, f"{unit.name}'s meter stayed open"
        reconcile.reconcile_units()


def test_a_failed_interruptible_unit_gives_way_before_running_ones(tenant, cluster, settings):
    """Issue 40, hole 2: an interruptible unit whose pod holds devices while nothing runs (its
    image never pulls: Failed) is preempted first, though it is the oldest."""
    settings.PREEMPTION_WAIT_SECONDS = 0
    spot = l40s_package(
        "l40s-2x-spot-f", 2, price="2.00", interruptible=True, interruptible_price="0.50"
    )
    pair = l40s_package("l40s-2x-f", 2, price="2.00")
    other = TenantFactory()
    spot_client = client_for(tenant)
    try:
        broken = order_unit(
            spot_client,
            "spot-broken",
            spot.id,
            interruptible=True,
            image="registry.invalid/team/trainer:1",
        )
        wait_for_phase(broken, "Failed", reason="ImagePullFailed")
        assert devices(broken)  # it holds its two L40S
        for index in range(3):
            wait_for_phase(
                order_unit(spot_client, f"spot-{index}", spot.id, interruptible=True), "Running"
            )
        sync_inventory()
        waiting = wait_for_phase(
            order_unit(client_for(other), "needs-two", pair.id),
            "Pending",
            reason="NoMatchingDevices",
        )

        assert preemption.give_notice(now=timezone.now()) == 1

        told = [u.name for u in GPUUnit.objects.filter(tenant=tenant) if u.preemption]
        assert told == ["spot-broken"]
        broken.refresh_from_db()
        assert broken.preemption["for"] == str(waiting.uid)
    finally:
        remove_namespace_objects(tenant.namespace)
        remove_namespace_objects(other.namespace)


def test_a_preemption_is_called_off_when_its_waiting_unit_is_deleted(tenant, cluster, settings):
    """Issue 40, hole 5: the victims were told, then the on-demand order was deleted before
    their notice ran out: nobody is stopped, and each is told it keeps its devices."""
    settings.PREEMPTION_WAIT_SECONDS = 0
    spot = l40s_package(
        "l40s-2x-spot-c",
        2,
        price="2.00",
        interruptible=True,
        interruptible_price="0.50",
        preemption_notice_seconds=1,
    )
    whole = l40s_package("l40s-4x-c", 4, price="4.00")
    other = TenantFactory()
    spot_client, client = client_for(tenant), client_for(other)
    try:
        spots = [
            wait_for_phase(
                order_unit(spot_client, f"spot-{index}", spot.id, interruptible=True), "Running"
            )
            for index in range(4)
        ]
        sync_inventory()
        waiting = order_unit(client, "big", whole.id)
        wait_for_phase(waiting, "Pending", reason="NoMatchingDevices")
        assert preemption.give_notice(now=timezone.now()) == 2
        told = [unit for unit in spots if (unit.refresh_from_db() or unit.preemption)]
        preempt_at = max(datetime.fromisoformat(u.preemption["preemptAt"]) for u in told)

        assert client.delete("/api/v1/gpu-units/big").status_code == 202

        assert preemption.carry_out(now=preempt_at) == 0
        for unit in told:
            unit.refresh_from_db()
            assert unit.preemption == {}
            assert unit.phase == UnitPhase.RUNNING
            assert unit.events.filter(reason="PreemptionCalledOff").exists()
        assert spot_client.get("/api/v1/gpu-units/spot-3").json()["data"]["preemption"] is None
        assert preemption.give_notice(now=timezone.now()) == 0  # nobody waits now
    finally:
        remove_namespace_objects(tenant.namespace)
        remove_namespace_objects(other.namespace)
