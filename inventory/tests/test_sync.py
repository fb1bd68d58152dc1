"""sync_inventory against development clusters (a real API server, scheduler and KWOK nodes):
fields equal what the cluster's objects say, pools mid-update, freed devices, availability,
statement counts, failures and the API."""

from __future__ import annotations

import contextlib
import json

import pytest
from django.apps import apps
from django.conf import settings
from rest_framework.test import APIClient

from catalog.tests.factories import PackageFactory
from controlplane import kube
from devstack.cluster import DevCluster
from inventory.models import Cluster, Device, DevicePool, SyncRun
from inventory.sync import sync_inventory
from runtime import orders
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase
from tenancy.tests.factories import TenantFactory, key_for
from tests.endpoints import recording

pytestmark = pytest.mark.django_db(transaction=True)


@contextlib.contextmanager
def pointed_at(dev: DevCluster, tmp_path):
    """This process's calls go to `dev` (not the session's cluster) while it is in effect."""
    previous = settings.KUBECONFIG
    port = dev.ports["kube-apiserver"]
    settings.KUBECONFIG = str(dev.write_kubeconfig(tmp_path / f"kubeconfig-{port}"))
    kube.reset()
    try:
        yield dev
    finally:
        settings.KUBECONFIG = previous
        kube.reset()


def generated(tmp_path, nodes: int, gpus: int) -> DevCluster:
    """A development cluster of `nodes` nodes of `gpus` H100s each (in a folder of its own)."""
    return DevCluster(
        tmp_path / f"cluster-{nodes}x{gpus}",
        topology={"generate": {"nodes": nodes, "gpus_per_node": gpus}},
    )


@pytest.fixture
def operator_client():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(TenantFactory(is_operator=True))}")
    return client


def inventory(client) -> dict:
    response = client.get("/api/v1/operator/inventory")
    assert response.status_code == 200, response.content
    return json.loads(response.content)["data"]


def expected_from_cluster() -> dict:
    """The article's fields computed straight from the cluster's objects."""
    slices = kube.list_objects(kube.RESOURCESLICE)
    claims = kube.list_objects(kube.RESOURCECLAIM)
    pools: dict = {}
    for s in slices:
        pool = s["spec"]["pool"]
        pools.setdefault((s["spec"]["driver"], pool["name"]), []).append(s)
    total = 0
    for members in pools.values():
        top = max(m["spec"]["pool"]["generation"] for m in members)
        latest = [m for m in members if m["spec"]["pool"]["generation"] == top]
        if len(latest) == latest[0]["spec"]["pool"]["resourceSliceCount"]:
            total += sum(len(m["spec"].get("devices", [])) for m in latest)
    results = [
        (c["metadata"]["namespace"], c["metadata"]["name"], r["device"])
        for c in claims
        for r in ((c.get("status") or {}).get("allocation") or {})
        .get("devices", {})
        .get("results", [])
    ]
    return {
        "totalGpuAllocatable": total,
        "draClaimCount": len(claims),
        "draAllocatedClaims": sum(1 for c in claims if (c.get("status") or {}).get("allocation")),
        "draAllocatedDevices": len(results),
        "draResourceSlices": len(slices),
        "draDevices": sorted(results),
    }


def as_article(data: dict) -> dict:
    fields = {
        k: data[k]
        for k in (
            "totalGpuAllocatable",
            "draClaimCount",
            "draAllocatedClaims",
            "draAllocatedDevices",
            "draResourceSlices",
        )
    }
    fields["draDevices"] = sorted(
        (d["namespace"], d["claimName"], d["device"]) for d in data["draDevices"]
    )
    return fields


@pytest.mark.usefixtures("celery_worker")
def test_inventory_follows_units_and_frees_devices_on_delete(cluster, operator_client):
    tenant = TenantFactory(quota_cpu="1000", quota_memory="8Ti")  # only the cluster binds
    PackageFactory(article=True)
    PackageFactory(
        id="gpu-h100-1x",
        spec_name="h100",
        cpu="16",
        memory="128Gi",
        gpu=1,
        count=1,
        device_class_name="nvidia-h100",
    )
    customer = APIClient()
    customer.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(tenant)}")
    try:
        sync_inventory()
        before = customer.get("/api/v1/packages").json()["data"]
        before = {p["id"]: p["availability"] for p in before}

        units = [
            orders.create_unit(
                tenant=tenant, operation_id=f"op-{n}", name=n, package_id=p, image="python:3.12"
            ).unit
            for n, p in (("a", "gpu-rtx3080-2x-cpu10-mem40g"), ("b", "gpu-h100-1x"))
        ]
        for unit in units:
            wait_for_phase(unit, "Running")
        sync_inventory()
        data = inventory(operator_client)
        assert as_article(data) == expected_from_cluster()
        assert data["stale"] is False
        assert data["draAllocatedDevices"] >= 3
        rtx = next(c for c in data["deviceClasses"] if c["name"] == "nvidia-rtx-3080")
        assert rtx["total"] == 8
        assert Device.objects.filter(claim_namespace=tenant.namespace).count() == 3

        after = {
            p["id"]: p["availability"] for p in customer.get("/api/v1/packages").json()["data"]
        }
        for package_id in ("gpu-rtx3080-2x-cpu10-mem40g", "gpu-h100-1x"):
            assert after[package_id]["placeableNow"] == before[package_id]["placeableNow"] - 1
        assert after["gpu-h100-1x"]["freeDevices"] == before["gpu-h100-1x"]["freeDevices"] - 1

        customer.delete("/api/v1/gpu-units/a")
        wait_for_phase(units[0], "Terminated")
        sync_inventory()
        assert as_article(inventory(operator_client)) == expected_from_cluster()
        assert Device.objects.filter(claim_namespace=tenant.namespace).count() == 1
    finally:
        remove_namespace_objects(tenant.namespace)


def test_the_endpoint_reads_the_stored_document_once_per_sync(cluster, operator_client):
    def reads_document(log) -> bool:
        return any('"document"' in sql for sql in log.statements)

    sync_inventory()
    with recording() as log:
        first = inventory(operator_client)
    assert reads_document(log)
    with recording() as log:
        assert inventory(operator_client) == first
    assert not reads_document(log)
    sync_inventory()
    with recording() as log:
        second = inventory(operator_client)
    assert reads_document(log)
    assert second["asOf"] != first["asOf"]
    assert as_article(second) == expected_from_cluster()


def test_package_no_node_fits_is_zero_with_reason(cluster, auth_client):
    PackageFactory(id="gpu-rtx3080-9x", spec_name="too-big", gpu=9, count=9)
    PackageFactory(
        id="gpu-ghost", spec_name="ghost", gpu=1, count=1, device_class_name="nvidia-b200"
    )
    sync_inventory()
    packages = {
        p["id"]: p["availability"] for p in auth_client.get("/api/v1/packages").json()["data"]
    }
    assert packages["gpu-rtx3080-9x"]["placeableNow"] == 0
    assert packages["gpu-rtx3080-9x"]["reason"] == "no node has 9 free matching devices"
    assert packages["gpu-ghost"]["reason"] == "device class nvidia-b200 does not exist"


def test_quota_headroom_bounds_availability(cluster, tenant):
    PackageFactory(article=True)
    tenant.quota_cpu = "15"
    tenant.save()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(tenant)}")
    sync_inventory()
    availability = client.get("/api/v1/packages").json()["data"][0]["availability"]
    assert availability["placeableNow"] == 1  # the cluster has room for more; 15 CPU allow one
    assert availability["freeDevices"] >= 2


def test_pool_mid_update_is_counted_as_the_allocator_would(tmp_path, operator_client):
    with generated(tmp_path, 1, 4) as dev, pointed_at(dev, tmp_path):
        pool = kube.list_objects(kube.RESOURCESLICE)[0]["spec"]["pool"]["name"]
        # The driver starts publishing generation 2 in two slices; only one has arrived.
        kube.create(
            kube.RESOURCESLICE,
            None,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{pool}-gen2-a"},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": pool,
                    "pool": {"name": pool, "generation": 2, "resourceSliceCount": 2},
                    "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}],
                },
            },
        )
        sync_inventory()
        data = inventory(operator_client)
        assert data["totalGpuAllocatable"] == 0  # the only pool is incomplete
        assert data["draResourceSlices"] == 2
        assert data["pools"][0]["complete"] is False
        assert data["pools"][0]["slices"] == "1/2"
        assert as_article(data) == expected_from_cluster()
        # Only generation 2 is visible: one device, not the four of generation 1.
        assert Device.objects.count() == 1
        assert DevicePool.objects.get().generation == 2


def test_statements_per_sync_do_not_grow_with_devices(tmp_path):
    def statements(nodes: int, gpus: int) -> tuple[int, int]:
        with generated(tmp_path, nodes, gpus) as dev, pointed_at(dev, tmp_path):
            for model in apps.get_app_config("inventory").get_models():
                if model is not Cluster:  # the registry is configuration, not the mirror
                    model.objects.all().delete()  # start from an empty mirror each time
            with recording() as first:
                sync_inventory()
            with recording() as steady:
                sync_inventory()
            assert Device.objects.count() == nodes * gpus
            return len(first.statements), len(steady.statements)

    assert statements(2, 5) == statements(125, 8)


def test_a_device_whose_entry_changes_is_written_again_whole(tmp_path):
    """The diff reads back a device's content hash, not its attributes, capacity or counters:
    an entry that changes changes its hash, and its row is written again whole."""
    with generated(tmp_path, 1, 2) as dev, pointed_at(dev, tmp_path):
        sync_inventory()
        resource_slice = kube.list_objects(kube.RESOURCESLICE)[0]
        changed, kept = resource_slice["spec"]["devices"]
        changed["attributes"]["driverVersion"] = {"version": "999.0.0"}
        changed["capacity"] = {"memory": {"value": "40Gi"}}
        # What the driver does when a device changes: it writes the slice again.
        kube.replace(kube.RESOURCESLICE, None, resource_slice["metadata"]["name"], resource_slice)
        applied = sync_inventory().counts["applied"]["devices"]
        assert applied == {"changed": 1, "deleted": 0}
        row = Device.objects.get(name=changed["name"])
        assert row.attributes["driverVersion"] == {"version": "999.0.0"}
        assert row.capacity == {"memory": {"value": "40Gi"}}
        assert Device.objects.get(name=kept["name"]).attributes == kept["attributes"]


def test_failed_sync_keeps_the_mirror_and_marks_it_stale(cluster, operator_client):
    sync_inventory()
    good = inventory(operator_client)
    cluster.faults.unreachable = True
    try:
        run = sync_inventory()
    finally:
        cluster.faults.unreachable = False
    assert "cannot read the cluster" in run.error
    stale = inventory(operator_client)
    assert stale["stale"] is True
    assert {k: v for k, v in stale.items() if k != "stale"} == {
        k: v for k, v in good.items() if k != "stale"
    }
    sync_inventory()
    assert inventory(operator_client)["stale"] is False


def test_one_sync_of_a_cluster_at_a_time_and_clusters_side_by_side(cluster):
    from django.db import connections

    from inventory.sync import _exclusive

    with _exclusive("default") as first:
        assert first
        other = connections.create_connection("default")
        try:
            # A second connection cannot sync that cluster while this one does ...
            with _exclusive_on(other, "default") as second:
                assert second is False
            # ... and can sync another one meanwhile.
            with _exclusive_on(other, "west-1") as elsewhere:
                assert elsewhere is True
        finally:
            other.close()
    assert SyncRun.objects.count() == 0


@contextlib.contextmanager
def _exclusive_on(connection, cluster):
    """inventory.sync._exclusive's lock, taken on another connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", [0x1A7E_5C00, cluster])
        acquired = cursor.fetchone()[0]
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_unlock(%s, hashtext(%s))", [0x1A7E_5C00, cluster]
                )
