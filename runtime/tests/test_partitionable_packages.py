"""MIG packages on a partitionable GPU (dynamic MIG, ARCHITECTURE §14) through the stack: the
development cluster publishes every placement of every profile of one H100, each drawing on the
GPU's shared counters. With a 7g.80gb unit running, GET /packages says no 1g.10gb fits (every
1g device is unallocated, but its memory slice is taken) and a 1g unit waits Pending; with a
3g.40gb unit running it says three do, and three reach Running while a fourth waits."""

from __future__ import annotations

import pytest

from catalog.tests.factories import PackageFactory
from inventory.sync import sync_inventory
from runtime.models import GPUUnit
from runtime.tests.helpers import cluster_of_its_own, order_unit, wait_for_phase
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = [pytest.mark.django_db(transaction=True)]

MIG = "mig.nvidia.com"
TOPOLOGY = {
    "products": {
        "NVIDIA H100 80GB HBM3": {
            "memory": "80Gi",
            "architecture": "Hopper",
            "cudaComputeCapability": "9.0.0",
        }
    },
    "deviceClasses": [
        {
            "name": MIG,
            "selectors": [
                "device.driver == 'gpu.nvidia.com' && "
                "device.attributes['gpu.nvidia.com'].type == 'mig'"
            ],
        }
    ],
    "nodes": [
        {
            "name": "gpu-node-mig-dynamic-0",
            "cpu": "48",
            "memory": "512Gi",
            "migGpus": [{"product": "NVIDIA H100 80GB HBM3", "partitionable": True}],
        }
    ],
}


@pytest.fixture
def partitioned_cluster(tmp_path, session_worker_paused, django_db_blocker):
    """The cluster with one partitionable H100, this process and a worker of its own."""
    with cluster_of_its_own(TOPOLOGY, tmp_path, "partitioned") as dev:
        yield dev


def mig_package(profile: str):
    return PackageFactory(
        id=f"h100-mig-{profile.replace('.', '')}",
        spec_name=f"gpu.h100.mig-{profile}",
        device_class_name=MIG,
        selectors=[f'device.attributes["gpu.nvidia.com"].profile == "{profile}"'],
        gpu=1,
        count=1,
        cpu="4",
        memory="16Gi",
    )


def test_counters_decide_what_mig_units_fit_on_a_partitionable_gpu(tenant, partitioned_cluster):
    seven, three, one = mig_package("7g.80gb"), mig_package("3g.40gb"), mig_package("1g.10gb")
    client = client_for(tenant)

    def availability(package) -> dict:
        sync_inventory()
        return client.get(f"/api/v1/packages/{package.id}").json()["data"]["availability"]

    def delete(unit: GPUUnit) -> None:
        assert client.delete(f"/api/v1/gpu-units/{unit.name}").status_code == 202
        wait_for_phase(unit, "Terminated")

    assert availability(one)["placeableNow"] == 7
    large = wait_for_phase(order_unit(client, "large", seven.id), "Running")
    assert [d["device"] for d in large.dra["devices"]] == ["gpu-0-mig-7g80gb-0-0"]
    shown = availability(one)
    assert (shown["placeableNow"], shown["freeDevices"]) == (0, 0)
    assert shown["reason"] == (
        f"the free devices of class {MIG} need counters already consumed "
        "(gpu-0-counter-set on gpu-node-mig-dynamic-0)"
    )
    operator = client_for(TenantFactory(is_operator=True))
    (counter_set,) = operator.get("/api/v1/operator/inventory").json()["data"]["counterSets"]
    assert counter_set["name"] == "gpu-0-counter-set"
    assert counter_set["counters"]["memory"] == {"total": "80Gi", "remaining": "0"}
    assert counter_set["counters"]["memory-slice-0"] == {"total": "1", "remaining": "0"}
    blocked = wait_for_phase(
        order_unit(client, "blocked", one.id), "Pending", reason="NoMatchingDevices"
    )
    delete(blocked)
    delete(large)

    # A 3g.40gb holds memory slices 0-3: a 1g.10gb fits on slices 4, 5 and 6 only.
    wait_for_phase(order_unit(client, "medium", three.id), "Running")
    shown = availability(one)
    assert (shown["placeableNow"], shown["freeDevices"], shown["reason"]) == (3, 3, "")
    small = [wait_for_phase(order_unit(client, f"small-{n}", one.id), "Running") for n in range(3)]
    assert sorted(d["device"] for unit in small for d in unit.dra["devices"]) == [
        f"gpu-0-mig-1g10gb-19-{start}" for start in (4, 5, 6)
    ]
    assert availability(one)["placeableNow"] == 0
    wait_for_phase(order_unit(client, "small-3", one.id), "Pending", reason="NoMatchingDevices")
