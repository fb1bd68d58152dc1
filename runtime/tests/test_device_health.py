"""Units on unhealthy devices, against the simulated cluster: a NoExecute DeviceTaintRule on a
device a unit holds evicts its pod as kube-controller-manager would, the unit shows Failed /
DeviceUnhealthy naming the device and is not restarted on its own; a restart lands it on
healthy devices (tainted ones are never allocated). Both paths: the observer's events, and
beat's backstop (reconcile and inventory sync) when no observer runs."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from catalog.tests.factories import PackageFactory
from controlplane import kube
from inventory.sync import sync_inventory
from runtime.control import reconcile
from runtime.control.observer import Observer
from runtime.models import GPUUnit, UnitPhase
from runtime.tests.helpers import remove_namespace_objects, unit_objects, wait_for_phase
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]

RULE = "unhealthy-gpu"


@pytest.fixture(autouse=True)
def _cleanup(tenant, cluster):
    yield
    if kube.get(kube.device_taint_rule_kind(), None, RULE) is not None:
        kube.delete(kube.device_taint_rule_kind(), None, RULE)
    remove_namespace_objects(tenant.namespace)


def taint(device: dict, effect: str = "NoExecute") -> None:
    rule = kube.device_taint_rule_kind()  # the version the cluster serves it at
    kube.create(
        rule,
        None,
        {
            "apiVersion": f"{rule.group}/{rule.version}",
            "kind": "DeviceTaintRule",
            "metadata": {"name": RULE},
            "spec": {
                "deviceSelector": {
                    "driver": device["driver"],
                    "pool": device["pool"],
                    "device": device["device"],
                },
                "taint": {"key": "gpu.nvidia.com/xid", "value": "79", "effect": effect},
            },
        },
    )


def order(client, name: str) -> GPUUnit:
    package = PackageFactory()
    response = client.post(
        "/api/v1/gpu-units",
        {"operationID": name, "name": name, "packageID": package.id, "image": "busybox"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    return GPUUnit.objects.get(name=name)


def wait_with_backstop(unit: GPUUnit, phase: str, timeout: float = 30.0) -> GPUUnit:
    """Beat's backstop only: the inventory sync, then the full reconcile, until `phase`."""
    deadline = time.monotonic() + timeout
    while True:
        sync_inventory()
        reconcile.reconcile_units()
        unit.refresh_from_db()
        if unit.phase == phase:
            return unit
        assert time.monotonic() < deadline, (unit.phase, unit.reason, unit.message)
        time.sleep(0.2)


def check_failed_and_restart(
    client, unit: GPUUnit, held: dict, wait, *, names_taint: bool = True
) -> None:
    """`names_taint`: the taint itself is in the message (the backstop reads it from the
    inventory mirror; the observer may act on the eviction before the mirror has it)."""
    assert unit.reason == "DeviceUnhealthy"
    assert f"{held['pool']}/{held['device']}" in unit.message
    assert "evicted" in unit.message
    if names_taint:
        assert "gpu.nvidia.com/xid=79:NoExecute" in unit.message, unit.message
    assert unit_objects(unit)["pod"] is None  # evicted, and not recreated by the reconcile
    shown = client.get(f"/api/v1/gpu-units/{unit.name}").json()["data"]
    assert (shown["phase"], shown["reason"]) == ("Failed", "DeviceUnhealthy")
    response = client.post(
        f"/api/v1/gpu-units/{unit.name}/restart", {"operationID": f"r-{unit.name}"}, format="json"
    )
    assert response.status_code == 202, response.json()
    unit = wait(unit, UnitPhase.RUNNING)
    devices = {(d["pool"], d["device"]) for d in unit.dra["devices"]}
    assert len(devices) == 2
    assert (held["pool"], held["device"]) not in devices


def test_the_backstop_fails_a_unit_on_a_tainted_device_and_a_restart_heals_it(tenant):
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "sick"), UnitPhase.RUNNING)
    held = unit.dra["devices"][0]
    taint(held)
    unit = wait_with_backstop(unit, UnitPhase.FAILED)
    check_failed_and_restart(client, unit, held, wait_with_backstop)
    # The inventory shows the tainted device and does not count it free.
    operator = client_for(TenantFactory(is_operator=True))
    sync_inventory()
    data = operator.get("/api/v1/operator/inventory").json()["data"]
    assert data["draTaintedDevices"] == 1
    (shown,) = data["taintedDevices"]
    assert shown["device"] == held["device"]
    assert shown["pool"] == held["pool"]
    rtx = next(c for c in data["deviceClasses"] if c["name"] == "nvidia-rtx-3080")
    assert rtx["free"] == 8 - 1 - 2  # the tainted one and the unit's two are not free


def test_the_observer_fails_it_within_moments(tenant):
    client = client_for(tenant)
    observer = Observer()
    thread = threading.Thread(target=lambda: (observer.run(), connection.close()), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not observer.synced():
            assert time.monotonic() < deadline
            time.sleep(0.05)

        def wait(unit: GPUUnit, phase: str, timeout: float = 20.0) -> GPUUnit:
            deadline = time.monotonic() + timeout
            while True:
                unit.refresh_from_db()
                if unit.phase == phase:
                    return unit
                assert time.monotonic() < deadline, (unit.phase, unit.reason, unit.message)
                time.sleep(0.05)

        unit = wait(order(client, "watched"), UnitPhase.RUNNING)
        held = unit.dra["devices"][0]
        taint(held)
        unit = wait(unit, UnitPhase.FAILED, timeout=10)
        check_failed_and_restart(client, unit, held, wait, names_taint=False)
    finally:
        observer.stop()
        thread.join(10)
