"""Interruptible units give way to on-demand ones (ARCHITECTURE §22), over the simulated
cluster and a real worker: the L40S node filled with interruptible units, an on-demand order
that needs half of it takes back exactly the two youngest with the package's notice, they end
Preempted (restartable), and the order lands on their devices."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from billing import prices
from billing.models import Meter, UsageRecord
from inventory.sync import sync_inventory
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
        waiting = wait_for_phase(order_unit(client, "big", whole.id), "Pending")
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

        # Nothing is stopped before its notice runs out; then both are.
        notice_at = min(datetime.fromisoformat(p["noticeAt"]) for p in told.values())
        preempt_at = max(datetime.fromisoformat(p["preemptAt"]) for p in told.values())
        assert preempt_at - notice_at == timedelta(seconds=1)  # the package's notice
        assert preemption.carry_out(now=notice_at) == 0
        assert preemption.carry_out(now=preempt_at) == 2
        for name in ("spot-2", "spot-3"):
            unit = wait_for_phase(GPUUnit.objects.get(name=name), "Preempted")
            assert unit.reason == "Preempted"
            # Billed at the interruptible price until its devices were released: the meter
            # closes once a reconcile sees the pod gone.
            wait_for_meter_closed(unit)
            rows = UsageRecord.objects.filter(unit_uid=unit.uid)
            assert {r.alternative for r in rows} == {prices.INTERRUPTIBLE}
        running = wait_for_phase(waiting, "Running")
        assert devices(running) <= held["spot-2"] | held["spot-3"]
        assert running.preemption_wait_until is None
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


def wait_for_meter_closed(unit: GPUUnit, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while Meter.objects.filter(unit_uid=unit.uid).exists():
        assert time.monotonic() < deadline, f"{unit.name}'s meter stayed open"
        reconcile.reconcile_units()
