"""Device taints in the inventory mirror, synced from a development cluster: each device's taints
with where they come from, tainted devices never counted free, the operator inventory and
package availability saying so, a cluster that serves no DeviceTaintRules, and the runtime's
`device_taints` selector."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from catalog.tests.factories import PackageFactory
from controlplane import kube
from devstack.cluster import DEVICE_TAINT_RULE_API, DevCluster
from inventory import selectors
from inventory.models import Device, SyncRun
from inventory.sync import sync_inventory
from inventory.tests.test_sync import inventory, pointed_at
from tenancy.tests.factories import TenantFactory, key_for

pytestmark = pytest.mark.django_db(transaction=True)

DRIVER = "gpu.nvidia.com"
XID = "gpu.nvidia.com/xid"


@pytest.fixture
def operator_client() -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(TenantFactory(is_operator=True))}")
    return client


@contextlib.contextmanager
def _one_node(tmp_path: Path, *, device_taint_rules: bool = True) -> Iterator[DevCluster]:
    """A development cluster of one node of four H100s. It serves DeviceTaintRules at
    resource.k8s.io/v1beta2 with their gate on, as development clusters do; without
    `device_taint_rules`, as a 1.36 cluster is by default: the gate off and that version not
    served (the API server's --runtime-config)."""
    served: dict[str, str] = {}
    gates = None
    if not device_taint_rules:
        served[DEVICE_TAINT_RULE_API] = "false"
        gates = {"DRADeviceTaintRules": False}
    cluster = DevCluster(
        tmp_path / "cluster",
        topology={"generate": {"nodes": 1, "gpus_per_node": 4, "product": "NVIDIA H100 80GB HBM3"}},
        feature_gates=gates,
        runtime_config=served,
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _taint_slice_device(device: str, taint: dict) -> str:
    """Have the driver publish `taint` on one device; the slice's name."""
    resource_slice = kube.list_objects(kube.RESOURCESLICE)[0]
    for entry in resource_slice["spec"]["devices"]:
        if entry["name"] == device:
            entry["taints"] = [taint]
    kube.replace(kube.RESOURCESLICE, None, resource_slice["metadata"]["name"], resource_slice)
    return resource_slice["metadata"]["name"]


def _add_rule(name: str, pool: str, device: str, effect: str) -> None:
    """Taint a device as an admin would, with a DeviceTaintRule at the version the cluster
    serves them."""
    kind = kube.device_taint_rule_kind()
    kube.create(
        kind,
        None,
        {
            "apiVersion": kind.api_version,
            "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": pool, "device": device},
                "taint": {"key": "example.com/maintenance", "effect": effect},
            },
        },
    )


def test_sync_mirrors_taints_and_the_inventory_and_packages_show_them(tmp_path, operator_client):
    PackageFactory(id="h100-1x", gpu=1, count=1, device_class_name="nvidia-h100")
    PackageFactory(id="h100-4x", gpu=4, count=4, device_class_name="nvidia-h100")
    customer = APIClient()
    customer.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(TenantFactory(quota_cpu='1000'))}")
    with _one_node(tmp_path) as dev, pointed_at(dev, tmp_path):
        pool = kube.list_objects(kube.RESOURCESLICE)[0]["spec"]["pool"]["name"]
        slice_name = _taint_slice_device(
            "gpu-0", {"key": XID, "value": "79", "effect": "NoSchedule"}
        )
        _add_rule("maintenance", pool, "gpu-1", "NoExecute")

        sync_inventory()
        data = inventory(operator_client)
        packages = {
            p["id"]: p["availability"] for p in customer.get("/api/v1/packages").json()["data"]
        }

    assert data["draTaintedDevices"] == 2
    tainted = {d["device"]: d for d in data["taintedDevices"]}
    assert sorted(tainted) == ["gpu-0", "gpu-1"]
    assert [
        (t["key"], t["value"], t["effect"], t["source"]) for t in tainted["gpu-0"]["taints"]
    ] == [(XID, "79", "NoSchedule", f"ResourceSlice/{slice_name}")]
    assert [(t["effect"], t["source"]) for t in tainted["gpu-1"]["taints"]] == [
        ("NoExecute", "DeviceTaintRule/maintenance")
    ]
    assert tainted["gpu-1"]["taints"][0]["timeAdded"]  # stamped by the API server
    node = data["nodes"][0]
    assert (node["total"], node["allocated"], node["tainted"], node["free"]) == (4, 0, 2, 2)
    h100 = next(c for c in data["deviceClasses"] if c["name"] == "nvidia-h100")
    assert (h100["tainted"], h100["free"]) == (2, 2)
    assert packages["h100-1x"]["placeableNow"] == 2
    assert packages["h100-1x"]["freeDevices"] == 2
    assert packages["h100-4x"]["placeableNow"] == 0
    assert packages["h100-4x"]["reason"] == (
        "no node has 4 free matching devices: 2 matching devices are tainted"
    )
    assert Device.objects.filter(tainted=True).count() == 2


def test_removing_the_rule_frees_the_device_at_the_next_sync(tmp_path, operator_client):
    with _one_node(tmp_path) as dev, pointed_at(dev, tmp_path):
        pool = kube.list_objects(kube.RESOURCESLICE)[0]["spec"]["pool"]["name"]
        _add_rule("drain", pool, "gpu-3", "NoSchedule")
        sync_inventory()
        before = inventory(operator_client)
        kube.delete(kube.device_taint_rule_kind(), None, "drain")
        sync_inventory()
        after = inventory(operator_client)

    assert (before["nodes"][0]["free"], before["draTaintedDevices"]) == (3, 1)
    assert (after["nodes"][0]["free"], after["draTaintedDevices"]) == (4, 0)
    assert after["taintedDevices"] == []


def test_a_cluster_that_serves_no_device_taint_rules_syncs_without_them(tmp_path, operator_client):
    with _one_node(tmp_path, device_taint_rules=False) as dev, pointed_at(dev, tmp_path):
        _taint_slice_device("gpu-2", {"key": XID, "effect": "NoExecute"})
        sync_inventory()
        data = inventory(operator_client)

    run = SyncRun.objects.get()
    assert (run.ok, run.error) == (True, "")
    assert [d["device"] for d in data["taintedDevices"]] == ["gpu-2"]
    assert data["nodes"][0]["free"] == 3


def test_device_taints_selector_answers_for_the_keys_asked_in_one_query(
    tmp_path, django_assert_num_queries
):
    with _one_node(tmp_path) as dev, pointed_at(dev, tmp_path):
        pool = kube.list_objects(kube.RESOURCESLICE)[0]["spec"]["pool"]["name"]
        slice_name = _taint_slice_device("gpu-0", {"key": XID, "effect": "NoSchedule"})
        _add_rule("first", pool, "gpu-0", "NoExecute")
        _add_rule("second", pool, "gpu-1", "NoSchedule")
        sync_inventory()

    asked = [
        (DRIVER, pool, "gpu-0"),
        (DRIVER, pool, "gpu-1"),
        (DRIVER, pool, "gpu-2"),  # in the mirror, untainted
        (DRIVER, "elsewhere", "gpu-1"),  # not in the mirror
    ]
    with django_assert_num_queries(1):
        found = selectors.device_taints(asked, cluster="default")
    with django_assert_num_queries(0):
        assert selectors.device_taints([], cluster="default") == {}

    assert found == {
        (DRIVER, pool, "gpu-0"): [
            {
                "key": XID,
                "value": "",
                "effect": "NoSchedule",
                "source": f"ResourceSlice/{slice_name}",
            },
            {
                "key": "example.com/maintenance",
                "value": "",
                "effect": "NoExecute",
                "source": "DeviceTaintRule/first",
            },
        ],
        (DRIVER, pool, "gpu-1"): [
            {
                "key": "example.com/maintenance",
                "value": "",
                "effect": "NoSchedule",
                "source": "DeviceTaintRule/second",
            }
        ],
    }
