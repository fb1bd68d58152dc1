"""Shared GPU packages (ARCHITECTURE §14) through the stack, on a development cluster with one
GPU that HAMi's DRA driver shares by `cores` and `memory`: four units of a quarter-GPU package
run on it, each with its share; GET /packages said how many more fit before each order, and a
fifth unit waits Pending. On a cluster whose consumable capacity is off, a share fails rather
than run as a whole GPU."""

from __future__ import annotations

import pytest
from django.conf import settings

from catalog.tests.factories import PackageFactory
from controlplane import kube
from devstack.cluster import DevCluster
from inventory.sync import sync_inventory
from runtime import orders
from runtime.control.provisioning import install_crd, provision_unit
from runtime.models import GPUUnit, Operation, UnitPhase
from runtime.tests.helpers import cluster_of_its_own, order_unit, wait_for_phase
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = [pytest.mark.django_db(transaction=True)]

HAMI = "hami-core-gpu.project-hami.io"
TOPOLOGY = {
    "products": {
        "NVIDIA H100 80GB HBM3": {
            "memory": "80Gi",
            "architecture": "Hopper",
            "cudaComputeCapability": "9.0.0",
            "nodeCpuPerGpu": 24,
            "nodeMemoryPerGpu": "256Gi",
        }
    },
    "deviceClasses": [{"name": HAMI, "selectors": [f"device.driver == '{HAMI}'"]}],
    "nodes": [
        {
            "name": "gpu-node-shared-0",
            "cpu": "64",
            "memory": "512Gi",
            "shareableGpus": [{"product": "NVIDIA H100 80GB HBM3", "count": 1}],
        }
    ],
}


@pytest.fixture
def shared_cluster(tmp_path, session_worker_paused, django_db_blocker):
    """The cluster with one shareable GPU, this process and a worker of its own pointed at it
    (the session's worker, on the session's cluster, takes nothing meanwhile)."""
    with cluster_of_its_own(TOPOLOGY, tmp_path, "shared") as dev:
        yield dev


def test_four_quarter_units_share_one_gpu_and_a_fifth_waits(tenant, shared_cluster):
    package = PackageFactory(
        id="h100-quarter",
        spec_name="gpu.h100.quarter",
        device_class_name=HAMI,
        gpu=1,
        count=1,
        cpu="4",
        memory="16Gi",
        capacity={"cores": "25", "memory": "20Gi"},
    )
    client = client_for(tenant)

    def placeable() -> int:
        sync_inventory()
        shown = client.get(f"/api/v1/packages/{package.id}").json()["data"]["availability"]
        return shown["placeableNow"]

    seen = []
    units = []
    for index in range(4):
        seen.append(placeable())
        units.append(wait_for_phase(order_unit(client, f"quarter-{index}", package.id), "Running"))
    assert seen == [4, 3, 2, 1]
    assert placeable() == 0
    devices = [unit.dra["devices"] for unit in units]
    assert all(len(held) == 1 for held in devices)
    assert {held[0]["device"] for held in devices} == {"hami-gpu-0"}
    assert len({held[0]["shareID"] for held in devices}) == 4
    assert {held[0]["consumedCapacity"]["cores"] for held in devices} == {"25"}
    shown = client.get("/api/v1/gpu-units/quarter-0").json()["data"]["draStatus"]["devices"][0]
    assert shown["shareID"]
    assert shown["consumedCapacity"]["memory"] == "20Gi"
    operator = client_for(TenantFactory(is_operator=True))
    sync_inventory()
    (device,) = operator.get("/api/v1/operator/inventory").json()["data"]["sharedDevices"]
    assert (device["device"], device["shares"]) == ("hami-gpu-0", 4)
    assert device["consumed"] == {"cores": "100", "memory": "80Gi"}
    assert device["remaining"] == {"cores": "0", "memory": "0"}
    wait_for_phase(
        order_unit(client, "quarter-4", package.id), "Pending", reason="NoMatchingDevices"
    )
    sync_inventory()
    reason = client.get(f"/api/v1/packages/{package.id}").json()["data"]["availability"]["reason"]
    assert "cores 25" in reason
    assert "left" in reason


@pytest.fixture
def cluster_without_capacity(tmp_path, session_worker_paused):
    """The same GPU on a cluster whose DRAConsumableCapacity gate is off (as on 1.34 and 1.35,
    where it was alpha and off by default): its API server drops a claim's capacity requests
    (and the slice's request policies) without a word. This process is pointed at it; the
    session's worker takes nothing meanwhile."""
    dev = DevCluster(
        tmp_path / "cluster", topology=TOPOLOGY, feature_gates={"DRAConsumableCapacity": False}
    )
    previous = settings.KUBECONFIG
    try:
        dev.start()
        settings.KUBECONFIG = str(dev.kubeconfig)
        kube.reset()
        install_crd()
        yield dev
    finally:
        settings.KUBECONFIG = previous
        kube.reset()
        dev.stop()


def test_a_share_on_a_cluster_that_drops_capacity_requests_fails_and_leaves_nothing(
    tenant, cluster_without_capacity
):
    PackageFactory(
        id="h100-quarter",
        spec_name="gpu.h100.quarter",
        device_class_name=HAMI,
        gpu=1,
        count=1,
        cpu="4",
        memory="16Gi",
        capacity={"cores": "25", "memory": "20Gi"},
    )
    created = orders.create_unit(
        tenant=tenant,
        operation_id="quarter-dropped",
        name="quarter-dropped",
        package_id="h100-quarter",
        image="busybox",
    )
    operation = Operation.objects.get(unit=created.unit)
    # The worker's service, here: the session's worker is on the session's cluster.
    provision_unit(operation_pk=operation.pk)
    unit = GPUUnit.objects.get(pk=created.unit.pk)
    # Not a whole GPU sold as a quarter: the unit fails, saying what the cluster dropped.
    assert (unit.phase, unit.reason) == (UnitPhase.FAILED, "ClusterLacksFeature")
    assert "spec.devices.requests[0].exactly.capacity" in unit.message
    assert "Kubernetes 1.36" in unit.message
    assert Operation.objects.get(pk=operation.pk).error_code == "ClusterLacksFeature"
    for kind in (kube.GPUUNIT, kube.RESOURCECLAIM, kube.POD):
        assert kube.list_objects(kind, namespace=tenant.namespace) == []
