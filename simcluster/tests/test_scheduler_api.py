"""The DRA side of the simulated cluster over HTTP with the official kubernetes client:
allocation and binding, Unschedulable reporting, deallocation, quota, CEL selectors, All mode
and incomplete pools."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from simcluster.cluster import SimCluster
from simcluster.tests.conftest import wait_until
from simcluster.topology import build_objects


@dataclass
class GpuEnv:
    """One test's namespace, nodes and device class; its product names are unique to the test,
    so the class never matches devices of other tests sharing the session cluster."""

    namespace: str
    device_class: str
    products: list[str]
    nodes: list[str]
    core: client.CoreV1Api
    resource: client.ResourceV1Api

    def claim(self, name: str, **exactly: Any) -> dict[str, Any]:
        body = {
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": self.device_class, **exactly},
                        }
                    ]
                }
            },
        }
        return self.resource.create_namespaced_resource_claim(self.namespace, body).to_dict()

    def pod(self, name: str, claim: str, cpu: str = "1") -> None:
        body = {
            "metadata": {"name": name},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox:1.36",
                        "resources": {
                            "requests": {"cpu": cpu, "memory": "1Gi"},
                            "limits": {"cpu": cpu, "memory": "1Gi"},
                            "claims": [{"name": "gpu", "request": "gpu"}],
                        },
                    }
                ],
            },
        }
        self.core.create_namespaced_pod(self.namespace, body)

    def read_pod(self, name: str) -> client.V1Pod:
        return self.core.read_namespaced_pod(name, self.namespace)

    def read_claim(self, name: str) -> Any:
        return self.resource.read_namespaced_resource_claim(name, self.namespace)

    def wait_running(self, name: str) -> client.V1Pod:
        return wait_until(
            lambda: self.read_pod(name),
            lambda p: p.status.phase == "Running",
            f"pod {name} Running",
        )

    def wait_unscheduled(self, name: str) -> client.V1PodCondition:
        def condition() -> client.V1PodCondition | None:
            conditions = self.read_pod(name).status.conditions or []
            return next(
                (c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None
            )

        return wait_until(condition, lambda c: c is not None, f"pod {name} PodScheduled=False")


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _make_env(
    sim: SimCluster, kube_api: client.ApiClient, gpus: list[int], slice_count: int = 1
) -> Iterator[GpuEnv]:
    core, resource = client.CoreV1Api(kube_api), client.ResourceV1Api(kube_api)
    tag = uuid.uuid4().hex[:8]
    namespace, device_class = f"dra-{tag}", f"sim-gpu-{tag}"
    products = [f"SIM GPU {tag} {i}" for i in range(len(gpus))]
    topology = {
        "nodes": [
            {
                "name": f"node-{tag}-{i}",
                "cpu": "8",
                "memory": "32Gi",
                "gpus": [{"product": products[i], "count": count, "memory": "40Gi"}]
                if count
                else [],
            }
            for i, count in enumerate(gpus)
        ]
    }
    nodes = [n["name"] for n in topology["nodes"]]
    core.create_namespace({"metadata": {"name": namespace}})
    for kind, obj in build_objects(topology):
        if kind == "nodes":
            # Nodes register themselves (kubelet); only the controller path may set their status.
            sim.store.create("nodes", obj, internal=True)
        else:
            obj["spec"]["pool"]["resourceSliceCount"] = slice_count
            resource.create_resource_slice(obj)
    tag_match = f"device.attributes['gpu.nvidia.com'].productName.contains('{tag}')"
    resource.create_device_class(
        {
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": tag_match}}]},
        }
    )
    yield GpuEnv(namespace, device_class, products, nodes, core, resource)
    core.delete_namespace(namespace)
    resource.delete_device_class(device_class)
    for resource_slice in resource.list_resource_slice().items:
        if resource_slice.spec.node_name in nodes:
            resource.delete_resource_slice(resource_slice.metadata.name)
    for node in nodes:
        core.delete_node(node)


@pytest.fixture
def gpus(sim: SimCluster, kube_api: client.ApiClient) -> Iterator[GpuEnv]:
    """Two nodes with 2 GPUs each, of two distinct products."""
    yield from _make_env(sim, kube_api, [2, 2])


@pytest.fixture
def updating_pool(sim: SimCluster, kube_api: client.ApiClient) -> Iterator[GpuEnv]:
    """One node whose pool claims two slices but has published only one."""
    yield from _make_env(sim, kube_api, [2], slice_count=2)


def test_claim_is_allocated_and_pod_runs_on_that_node(gpus: GpuEnv) -> None:
    gpus.claim("train", count=2)
    gpus.pod("trainer", "train")
    pod = gpus.wait_running("trainer")
    claim = gpus.read_claim("train")
    results = claim.status.allocation.devices.results
    assert {(r.driver, r.pool) for r in results} == {("gpu.nvidia.com", pod.spec.node_name)}
    assert sorted(r.device for r in results) == ["gpu-0", "gpu-1"]
    assert all(r.request == "gpu" for r in results)
    term = claim.status.allocation.node_selector.node_selector_terms[0]
    assert term.match_fields[0].values == [pod.spec.node_name]
    assert [(r.resource, r.name, r.uid) for r in claim.status.reserved_for] == [
        ("pods", "trainer", pod.metadata.uid)
    ]
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"


def test_pod_is_unschedulable_with_event_when_claim_exceeds_every_node(gpus: GpuEnv) -> None:
    gpus.claim("too-big", count=3)
    gpus.pod("hopeful", "too-big")
    condition = gpus.wait_unscheduled("hopeful")
    assert condition.reason == "Unschedulable"
    assert "cannot allocate all claims" in condition.message
    assert condition.message.startswith("0/")
    assert gpus.read_pod("hopeful").status.phase == "Pending"
    events = wait_until(
        lambda: [
            e
            for e in gpus.core.list_namespaced_event(gpus.namespace).items
            if e.reason == "FailedScheduling" and e.involved_object.name == "hopeful"
        ],
        bool,
        "FailedScheduling event",
    )
    assert events[0].type == "Warning"
    assert "cannot allocate all claims" in events[0].message
    assert gpus.read_claim("too-big").status is None


def test_deleting_the_pod_deallocates_its_claim(gpus: GpuEnv) -> None:
    gpus.claim("short", count=1)
    gpus.pod("brief", "short")
    gpus.wait_running("brief")
    gpus.core.delete_namespaced_pod("brief", gpus.namespace)
    claim = wait_until(
        lambda: gpus.read_claim("short"),
        lambda c: c.status is None or c.status.allocation is None,
        "claim deallocated",
    )
    assert not (claim.status and claim.status.reserved_for)
    assert not claim.metadata.finalizers


def test_freed_devices_let_a_pending_pod_run(gpus: GpuEnv) -> None:
    gpus.claim("first", count=2)
    gpus.pod("first", "first")
    gpus.claim("second", count=2)
    gpus.pod("second", "second")
    gpus.wait_running("first")
    gpus.wait_running("second")
    gpus.claim("third", count=2)
    gpus.pod("third", "third")
    gpus.wait_unscheduled("third")
    gpus.core.delete_namespaced_pod("first", gpus.namespace)
    assert gpus.wait_running("third").spec.node_name


def test_request_selector_picks_the_matching_product(gpus: GpuEnv) -> None:
    wanted = gpus.products[1]
    gpus.claim(
        "picky",
        count=1,
        selectors=[
            {
                "cel": {
                    "expression": f"device.attributes['gpu.nvidia.com'].productName == '{wanted}'"
                }
            }
        ],
    )
    gpus.pod("picky", "picky")
    assert gpus.wait_running("picky").spec.node_name == gpus.nodes[1]


def test_request_selector_matching_nothing_leaves_pod_pending(gpus: GpuEnv) -> None:
    memory = "device.capacity['gpu.nvidia.com'].memory"
    gpus.claim(
        "impossible",
        count=1,
        selectors=[{"cel": {"expression": f"{memory}.isGreaterThan(quantity('80Gi'))"}}],
    )
    gpus.pod("impossible", "impossible")
    assert "cannot allocate all claims" in gpus.wait_unscheduled("impossible").message


def test_all_mode_allocates_every_device_of_one_node(gpus: GpuEnv) -> None:
    gpus.claim("everything", allocationMode="All")
    gpus.pod("greedy", "everything")
    node = gpus.wait_running("greedy").spec.node_name
    results = gpus.read_claim("everything").status.allocation.devices.results
    assert sorted((r.pool, r.device) for r in results) == [(node, "gpu-0"), (node, "gpu-1")]


def test_incomplete_pool_serves_exact_count_but_not_all(updating_pool: GpuEnv) -> None:
    updating_pool.claim("some", count=1)
    updating_pool.pod("some", "some")
    updating_pool.wait_running("some")
    updating_pool.claim("all", allocationMode="All")
    updating_pool.pod("all", "all")
    condition = updating_pool.wait_unscheduled("all")
    assert condition.reason == "SchedulerError"
    assert f"resource pool gpu.nvidia.com/{updating_pool.nodes[0]} is currently being updated" in (
        condition.message
    )


def test_quota_rejects_claim_with_403_and_tracks_usage(gpus: GpuEnv) -> None:
    device_key = f"{gpus.device_class}.deviceclass.resource.k8s.io/devices"
    gpus.core.create_namespaced_resource_quota(
        gpus.namespace,
        {
            "metadata": {"name": "gpu-quota"},
            "spec": {"hard": {"count/resourceclaims.resource.k8s.io": "5", device_key: "3"}},
        },
    )
    gpus.claim("fits", count=2)
    with pytest.raises(ApiException) as raised:
        gpus.claim("overflows", count=2)
    assert raised.value.status == 403
    body = json.loads(raised.value.body)
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        f'resourceclaims.resource.k8s.io "overflows" is forbidden: exceeded quota: gpu-quota, '
        f"requested: {device_key}=2, used: {device_key}=2, limited: {device_key}=3"
    )
    quota = wait_until(
        lambda: gpus.core.read_namespaced_resource_quota("gpu-quota", gpus.namespace),
        lambda q: q.status is not None and q.status.used is not None,
        "quota status",
    )
    assert quota.status.used == {"count/resourceclaims.resource.k8s.io": "1", device_key: "2"}
    assert quota.status.hard == {"count/resourceclaims.resource.k8s.io": "5", device_key: "3"}
