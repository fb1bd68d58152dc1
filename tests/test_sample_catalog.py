"""Every package of the sample catalog (what `make run` sells) runs on the development cluster,
its devices allocated by the real kube-scheduler from the development driver's slices, over
the whole stack: whole GPUs, eight of them on one node, a fallback that takes its alternative
when the first choice is gone, a static MIG slice, a HAMi-style share of a GPU by consumable
capacity, and an interruptible order. (Reservations and their hand-over of devices:
runtime/tests/test_reservations*.py; preemption's: runtime/tests/test_preemption.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from runtime.models import GPUUnit, UnitPhase
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = [
    pytest.mark.long,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker"),
]

SAMPLE = Path(__file__).resolve().parents[1] / "catalog" / "samples" / "packages.yaml"
PACKAGES = {p["id"]: p for p in yaml.safe_load(SAMPLE.read_text())["packages"]}


@pytest.fixture
def tenant(db):
    """Room for the eight-H100 unit and the fallback beside it (the article's quota is
    160 CPU, 256Gi)."""
    return TenantFactory(quota_cpu="256", quota_memory="512Gi")


@pytest.fixture
def catalog(tenant, cluster):
    call_command("import_catalog", str(SAMPLE))
    yield
    remove_namespace_objects(tenant.namespace)


def run(client, name: str, package: str, **extra) -> GPUUnit:
    body = {"operationID": name, "name": name, "packageID": package, "image": "busybox", **extra}
    response = client.post("/api/v1/gpu-units", body, format="json")
    assert response.status_code == 201, response.json()
    return wait_for_phase(GPUUnit.objects.get(name=name), UnitPhase.RUNNING)


def delete(client, unit: GPUUnit) -> None:
    assert client.delete(f"/api/v1/gpu-units/{unit.name}").status_code == 202
    wait_for_phase(unit, UnitPhase.TERMINATED)


def shown(client, unit: GPUUnit) -> dict:
    return client.get(f"/api/v1/gpu-units/{unit.name}").json()["data"]


def test_every_sample_package_runs_on_devices_the_scheduler_allocated(tenant, catalog):
    client = client_for(tenant)
    seen = set()

    for number, (package, node, count) in enumerate(
        (
            ("gpu-rtx3080-1x-cpu4-mem16g", "gpu-node-rtx-0", 1),
            ("gpu-rtx3080-2x-cpu10-mem40g", "gpu-node-rtx-0", 2),
        )
    ):
        unit = run(client, f"whole-{number}", package)
        data = shown(client, unit)
        assert data["nodeName"] == node
        assert len({d["device"] for d in data["draStatus"]["devices"]}) == count
        assert {d["pool"] for d in data["draStatus"]["devices"]} == {node}
        delete(client, unit)
        seen.add(package)

    # Eight on one node; then one H100 gets the last whole H100, the partitionable one (its
    # whole-GPU device is an H100 like any); then the fallback finds no H100 and gets its L40S.
    eight = run(client, "eight", "gpu-h100-8x-cpu128-mem240g")
    assert {d["pool"] for d in shown(client, eight)["draStatus"]["devices"]} == {"gpu-node-h100-0"}
    assert len(shown(client, eight)["draStatus"]["devices"]) == 8
    one = run(client, "one", "gpu-h100-1x-cpu16-mem128g")
    [device] = shown(client, one)["draStatus"]["devices"]
    assert (device["pool"], device["device"]) == ("gpu-node-mig-dynamic-0", "gpu-0")
    fallback = run(client, "fallback", "gpu-h100-1x-else-l40s-1x")
    data = shown(client, fallback)
    assert data["nodeName"] == "gpu-node-l40s-0"
    assert data["draStatus"]["alternative"] == "l40s"
    [device] = data["draStatus"]["devices"]
    assert device["request"] == "gpu/l40s"
    for unit in (fallback, one, eight):
        delete(client, unit)
    seen |= {"gpu-h100-8x-cpu128-mem240g", "gpu-h100-1x-cpu16-mem128g", "gpu-h100-1x-else-l40s-1x"}

    # A 1g.10gb MIG slice of the static MIG node (or the partitionable H100's placement).
    mig = run(client, "mig", "gpu-h100-mig-1g10gb-cpu4-mem16g")
    [device] = shown(client, mig)["draStatus"]["devices"]
    assert device["pool"] in ("gpu-node-mig-0", "gpu-node-mig-dynamic-0")
    assert "mig-1g" in device["device"]
    delete(client, mig)
    seen.add("gpu-h100-mig-1g10gb-cpu4-mem16g")

    # A quarter of a shared H100: a share of the device's cores and memory.
    quarter = run(client, "quarter", "gpu-h100-quarter-cpu4-mem32g")
    [device] = shown(client, quarter)["draStatus"]["devices"]
    assert device["driver"] == "hami-core-gpu.project-hami.io"
    assert device["shareID"]
    assert device["consumedCapacity"] == {"cores": "25", "memory": "20Gi"}
    delete(client, quarter)
    seen.add("gpu-h100-quarter-cpu4-mem32g")

    spot = run(client, "spot", "gpu-l40s-4x-cpu48-mem192g", interruptible=True)
    data = shown(client, spot)
    assert data["interruptible"] is True
    assert len(data["draStatus"]["devices"]) == 4
    delete(client, spot)
    seen.add("gpu-l40s-4x-cpu48-mem192g")

    assert seen == set(PACKAGES)
