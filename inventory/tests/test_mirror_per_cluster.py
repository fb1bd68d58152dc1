"""Each cluster has a mirror of its own: two development clusters synced into one database keep
their rows apart (the same node and device names in both), a cluster's sync leaves the other's
rows alone, and the readers answer per cluster or over all of them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from rest_framework.test import APIClient

from catalog.tests.factories import PackageFactory
from controlplane import kube
from devstack.cluster import DevCluster
from inventory import selectors
from inventory.models import Cluster, Device, Node, PackageAvailability, SyncRun
from inventory.sync import sync_inventory
from tenancy.tests.factories import TenantFactory, key_for

# Each sync commits (its staging tables go with the commit), as in a worker.
pytestmark = pytest.mark.django_db(transaction=True)

RTX_3080 = "NVIDIA GeForce RTX 3080"


def _cluster(folder, nodes: int, gpus_per_node: int) -> DevCluster:
    return DevCluster(
        folder,
        topology={
            "generate": {"nodes": nodes, "gpus_per_node": gpus_per_node, "product": RTX_3080}
        },
        proxy=True,
    )


@pytest.fixture(scope="module")
def dev_clusters(tmp_path_factory) -> Iterator[tuple[DevCluster, DevCluster]]:
    """East (2 nodes of 4 GPUs) and west (1 node of 2), each behind its fault proxy; both
    name their first node gpu-node-0."""
    with (
        _cluster(tmp_path_factory.mktemp("east"), 2, 4) as east,
        _cluster(tmp_path_factory.mktemp("west"), 1, 2) as west,
    ):
        yield east, west


@pytest.fixture
def two_clusters(dev_clusters, cluster_credentials):
    """`east-1` and `west-1` in the registry, reached by kubeconfig files. West is disabled:
    until observation runs per cluster one cluster is enabled at a time, and a sync does not
    ask."""
    east, west = dev_clusters
    Cluster.objects.update(enabled=False)
    for name, region, dev, enabled in (
        ("east-1", "us-east", east, True),
        ("west-1", "eu-west", west, False),
    ):
        Cluster.objects.create(
            name=name,
            region=region,
            enabled=enabled,
            kubeconfig=dev.write_kubeconfig(cluster_credentials / f"kubeconfig-{name}").name,
        )
    kube.reset()  # connections are per process and cluster name
    try:
        yield east, west
    finally:
        for dev in dev_clusters:
            dev.faults.clear()
        kube.reset()


def _document(client: APIClient, **params: str) -> dict:
    response = client.get("/api/v1/operator/inventory", params)
    assert response.status_code == 200, response.content
    return json.loads(response.content)["data"]


def test_each_cluster_syncs_into_a_mirror_of_its_own(two_clusters):
    PackageFactory(id="gpu-rtx3080-2x")
    assert sync_inventory("east-1").ok
    assert sync_inventory("west-1").ok

    devices = {
        cluster: Device.objects.filter(cluster=cluster).count() for cluster in ("east-1", "west-1")
    }
    assert devices == {"east-1": 8, "west-1": 2}
    assert sorted(Node.objects.values_list("cluster", "name")) == [
        ("east-1", "gpu-node-0"),
        ("east-1", "gpu-node-1"),
        ("west-1", "gpu-node-0"),
    ]
    assert set(SyncRun.objects.values_list("cluster", flat=True)) == {"east-1", "west-1"}

    # A sync of one cluster rewrites its rows only: west's again leaves east's as they are.
    east_rows = sorted(Device.objects.filter(cluster="east-1").values_list("id", "name"))
    assert sync_inventory("west-1").ok
    assert sorted(Device.objects.filter(cluster="east-1").values_list("id", "name")) == east_rows

    availability = {
        row.cluster: (row.placeable, row.free_devices)
        for row in PackageAvailability.objects.filter(package_id="gpu-rtx3080-2x")
    }
    assert availability == {"east-1": (4, 8), "west-1": (1, 2)}
    summed = selectors.list_package_availability()["gpu-rtx3080-2x"]
    assert (summed.placeable, summed.free_devices) == (5, 10)
    west = selectors.list_package_availability("west-1")["gpu-rtx3080-2x"]
    assert (west.placeable, west.free_devices) == (1, 2)


def test_the_operator_inventory_is_one_clusters(two_clusters):
    sync_inventory("east-1")
    sync_inventory("west-1")
    operator = APIClient()
    operator.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(TenantFactory(is_operator=True))}")

    west = _document(operator, cluster="west-1")
    assert (west["cluster"], west["totalGpuAllocatable"], west["stale"]) == ("west-1", 2, False)
    assert _document(operator, cluster="east-1")["totalGpuAllocatable"] == 8

    refused = operator.get("/api/v1/operator/inventory", {"cluster": "nowhere"})
    assert refused.status_code == 400
    assert "cluster" in refused.json()["error"]["details"]["fields"]


def test_a_failed_sync_marks_only_its_cluster(two_clusters):
    _east, west_cluster = two_clusters
    assert sync_inventory("east-1").ok
    assert sync_inventory("west-1").ok
    west_cluster.faults.unreachable = True
    assert not sync_inventory("west-1").ok
    east, west = selectors.get_freshness("east-1"), selectors.get_freshness("west-1")
    assert (east.stale, east.last_error) == (False, "")
    assert west.stale
    assert west.last_error.startswith("cannot read the cluster")
    # West's mirror is kept as it was last seen, and east's health is its own.
    assert Device.objects.filter(cluster="west-1").count() == 2
    states = {s.cluster.name: s for s in selectors.cluster_states()}
    assert (states["east-1"].health, states["east-1"].last_error) == ("reachable", "")
