"""Availability on partitionable devices (dynamic MIG: every placement published, shared counters
decide what fits): the mirror's counter sets, and placeable units counted as the real
kube-scheduler places them, checked against that scheduler on a development cluster.

Each test (each example of the property) publishes a node of its own to the module's cluster
and pins its pods to it, so what earlier ones placed is not in its way."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devstack import driver
from devstack.cluster import DevCluster
from inventory import observe

MIG = "mig.nvidia.com"
PARENT = "gpu.nvidia.com/parentUUID"
PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
NODE_CPU = 96
NAMESPACE = "counters"
NODE_LABEL = "test.lokiwager.io/node"
H100 = "NVIDIA H100 80GB HBM3"
PRODUCTS = {H100: {"memory": "80Gi", "architecture": "Hopper"}}
DEVICE_CLASSES = [
    {
        "name": MIG,
        "selector": "device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'mig'",
    },
    {
        "name": "gpu.nvidia.com",
        "selector": "device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'gpu'",
    },
]
CLAIMS = ("resource.k8s.io/v1", "ResourceClaim")
_numbers = itertools.count()


@pytest.fixture(scope="module")
def dev(tmp_path_factory) -> Iterator[DevCluster]:
    """A development cluster with the MIG and whole-GPU classes and no nodes yet."""
    with DevCluster(
        tmp_path_factory.mktemp("counters"),
        topology={"products": PRODUCTS, "deviceClasses": DEVICE_CLASSES, "nodes": []},
    ) as cluster:
        cluster.api.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        _wait_until(
            lambda: cluster.api.get("v1", "ServiceAccount", "default", NAMESPACE),
            "the namespace's service account was made",
        )
        yield cluster


def _wait_until(condition, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)
    return found


def mig_node(gpus: int = 1, cpu: int = NODE_CPU) -> dict:
    return {
        "cpu": str(cpu),
        "memory": "1Ti",
        "migGpus": [{"product": H100, "partitionable": True, "count": gpus}],
    }


def selector(profile: str) -> str:
    return f'device.attributes["gpu.nvidia.com"].profile == "{profile}"'


def package(profile: str, count: int = 1, match: str = "", cpu: int = 1000) -> observe.PackageSpec:
    return observe.PackageSpec(
        id=f"mig-{profile.replace('.', '')}-{count}{'-paired' if match else ''}",
        device_class_name=MIG,
        selectors=(selector(profile),),
        count=count,
        cpu_millicores=cpu,
        memory_bytes=1 << 30,
        match_attribute=match,
    )


WHOLE = observe.PackageSpec("h100", "gpu.nvidia.com", (), 1, 1000, 1 << 30)


class Node:
    """A node of its own in the module's cluster (its name a pool of the driver's), units
    placed on it by the real scheduler one pod and claim each, and what the sync would list of
    it."""

    def __init__(self, dev: DevCluster, node: dict) -> None:
        self.dev = dev
        self.name = f"node-{next(_numbers)}"
        driver.publish(
            dev.api,
            {"products": PRODUCTS, "deviceClasses": [], "nodes": [{**node, "name": self.name}]},
        )
        _wait_until(self._ready, f"node {self.name} is Ready")
        self.units = 0

    def _ready(self) -> bool:
        node = self.dev.api.get("v1", "Node", self.name) or {}
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        return conditions.get("Ready") == "True" and not node.get("spec", {}).get("taints")

    def place(self, spec: observe.PackageSpec) -> str | None:
        """A unit of the package: the first device the scheduler allocated it, or None when
        it finds no fit (the pod and claim are then deleted)."""
        name = f"{self.name}-{self.units}"
        self.units += 1
        exactly: dict[str, Any] = {"deviceClassName": spec.device_class_name, "count": spec.count}
        if spec.selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in spec.selectors]
        devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
        if spec.match_attribute:
            devices["constraints"] = [{"requests": ["gpu"], "matchAttribute": spec.match_attribute}]
        labels = {NODE_LABEL: self.name}
        self._create(
            {
                "apiVersion": CLAIMS[0],
                "kind": CLAIMS[1],
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                "spec": {"devices": devices},
            }
        )
        self._create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": self.name},
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {
                                "requests": {"cpu": f"{spec.cpu_millicores}m", "memory": "1Gi"},
                                "claims": [{"name": "gpu"}],
                            },
                        }
                    ],
                },
            }
        )
        placed = _wait_until(lambda: self._decided(name), f"the scheduler decided on {name}")
        if placed == "unschedulable":
            self.dev.remove("Pod", NAMESPACE, name)
            self.dev.api.delete(*CLAIMS, name, NAMESPACE)
            return None
        return placed

    def _create(self, obj: dict) -> None:
        self.dev.api.request(
            "POST", self.dev.api.path(obj["apiVersion"], obj["kind"], NAMESPACE), obj
        )

    def _decided(self, name: str) -> str:
        """The first device allocated once the pod is bound, "unschedulable" once the
        scheduler said so, "" before either."""
        pod = self.dev.pod(NAMESPACE, name) or {}
        for condition in pod.get("status", {}).get("conditions", []):
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return "unschedulable"
        if not pod.get("spec", {}).get("nodeName"):
            return ""
        # The scheduler writes the claim's allocation before it binds the pod.
        claim = self.dev.api.get(*CLAIMS, name, NAMESPACE)
        assert claim is not None, name
        return claim["status"]["allocation"]["devices"]["results"][0]["device"]

    def observe(self, packages: list[observe.PackageSpec]) -> observe.Observation:
        api = self.dev.api
        return observe.observe(
            nodes=[api.get("v1", "Node", self.name)],
            device_classes=api.list("resource.k8s.io/v1", "DeviceClass"),
            slices=[
                s
                for s in api.list("resource.k8s.io/v1", "ResourceSlice")
                if s["spec"].get("nodeName") == self.name
            ],
            claims=api.list(*CLAIMS, NAMESPACE, labelSelector=f"{NODE_LABEL}={self.name}"),
            pods=api.list("v1", "Pod", NAMESPACE, labelSelector=f"{NODE_LABEL}={self.name}"),
            quotas=[],
            packages=packages,
        )

    def availability(self, spec: observe.PackageSpec) -> dict:
        return observe.package_availability(self.observe([spec]), [spec])[spec.id]

    def remove(self) -> None:
        """Its pods and claims at once, and the node (its slices go with it)."""
        selector = f"{NODE_LABEL}={self.name}"
        for pod in self.dev.api.list("v1", "Pod", NAMESPACE, labelSelector=selector):
            self.dev.remove("Pod", NAMESPACE, pod["metadata"]["name"])
        for claim in self.dev.api.list(*CLAIMS, NAMESPACE, labelSelector=selector):
            self.dev.remove("ResourceClaim", NAMESPACE, claim["metadata"]["name"])
        self.dev.api.delete("v1", "Node", self.name)


@pytest.fixture
def node_of(dev) -> Iterator:
    """Publish a node of the test's own (a topology's node entry); its objects go when the
    test ends."""
    made: list[Node] = []

    def make(shape: dict) -> Node:
        made.append(Node(dev, shape))
        return made[-1]

    yield make
    for node in made:
        node.remove()


def test_a_7g_leaves_no_1g_placeable_on_its_gpu(node_of):
    node = node_of(mig_node())
    assert node.place(package("7g.80gb")) == "gpu-0-mig-7g80gb-0-0"
    one_g = package("1g.10gb")
    shown = node.availability(one_g)
    # Seven 1g.10gb devices are unallocated, but each needs a memory slice the 7g holds.
    assert shown == {
        "placeable": 0,
        "free_devices": 0,
        "reason": "the free devices of class mig.nvidia.com need counters already consumed "
        f"(gpu-0-counter-set on {node.name})",
    }
    assert node.place(one_g) is None


def test_a_1g_leaves_two_of_the_three_2g_placements(node_of):
    node = node_of(mig_node())
    assert node.place(package("1g.10gb")) == "gpu-0-mig-1g10gb-19-0"
    two_g = package("2g.20gb")
    assert node.availability(two_g)["placeable"] == 2  # slices 2-3 and 4-5; 0-1 is taken
    assert node.availability(package("1g.10gb"))["placeable"] == 6
    # The whole GPU draws every counter: any MIG device in use keeps it off.
    whole = node.availability(WHOLE)
    assert whole["placeable"] == 0
    assert "need counters already consumed" in whole["reason"]
    assert node.place(WHOLE) is None
    assert [node.place(two_g) for _ in range(3)] == [
        "gpu-0-mig-2g20gb-14-2",
        "gpu-0-mig-2g20gb-14-4",
        None,
    ]


def test_two_devices_that_do_not_fit_together_are_no_unit(node_of):
    node = node_of(mig_node())
    node.place(package("3g.40gb"))  # slices 0-3
    pair = package("3g.40gb", count=2)
    # The 3g at slice 4 still fits, alone: a unit of two has nowhere to go.
    assert node.availability(pair) == {
        "placeable": 0,
        "free_devices": 1,
        "reason": "no node has 2 free matching devices whose counters fit together",
    }
    assert node.place(pair) is None


def test_units_are_the_fewer_of_what_counters_and_cpu_allow(node_of):
    node = node_of(mig_node(cpu=5))
    node.place(package("3g.40gb"))  # slices 0-3 and one cpu
    # Four cpus are left, but only slices 4, 5 and 6 take a 1g.10gb.
    one_g = package("1g.10gb")
    assert node.availability(one_g)["placeable"] == 3
    assert [node.place(one_g) is not None for _ in range(4)] == [True, True, True, False]
    roomy = node_of(mig_node(cpu=3))
    assert roomy.availability(one_g)["placeable"] == 3  # seven fit, three cpus
    assert [roomy.place(one_g) is not None for _ in range(4)] == [True, True, True, False]


def test_counter_sets_are_mirrored_with_what_allocated_devices_left(node_of):
    node = node_of(mig_node())
    node.place(package("3g.40gb"))
    observation = node.observe([])
    document = observe.build_document(observation)
    (counter_set,) = document["counterSets"]
    assert {k: counter_set[k] for k in ("driver", "pool", "name", "nodeName")} == {
        "driver": "gpu.nvidia.com",
        "pool": node.name,
        "name": "gpu-0-counter-set",
        "nodeName": node.name,
    }
    shown = counter_set["counters"]
    assert shown["memory"] == {"total": "80Gi", "remaining": "40Gi"}
    assert shown["multiprocessors"] == {"total": "132", "remaining": "72"}
    assert shown["memory-slice-0"] == {"total": "1", "remaining": "0"}
    assert shown["memory-slice-4"] == {"total": "1", "remaining": "1"}
    pool = observation.pools[("gpu.nvidia.com", node.name)]
    assert pool["counter_sets"] == [{"name": "gpu-0-counter-set", "counters": shown}]
    device = observation.devices[("gpu.nvidia.com", node.name, "gpu-0-mig-3g40gb-9-4")]
    assert device["consumes_counters"][0]["counterSet"] == "gpu-0-counter-set"


def test_devices_without_counters_have_no_counter_sets(node_of):
    node = node_of({"gpus": [{"product": "X", "count": 2}]})
    observation = node.observe([])
    assert len(observation.devices) == 2
    assert observe.build_document(observation)["counterSets"] == []
    assert all(d["consumes_counters"] == [] for d in observation.devices.values())


SPECS = [
    *(package(profile) for profile in PROFILES),
    package("1g.10gb", count=2),
    package("1g.10gb", count=3, match=PARENT),
    package("2g.20gb", count=2, match=PARENT),
    WHOLE,
]


@settings(max_examples=60, deadline=None)
@given(
    before=st.lists(st.sampled_from(SPECS), max_size=8),
    target=st.sampled_from(SPECS),
)
def test_placeable_now_is_what_the_scheduler_places(dev, before, target):
    """However the GPUs are already carved up, placeableNow is how many more units of the
    package the scheduler places, one after another."""
    node = Node(dev, mig_node(gpus=2, cpu=10))
    try:
        for spec in before:
            node.place(spec)
        expected = node.availability(target)["placeable"]
        placed = 0
        while node.place(target) is not None:
            placed += 1
        assert expected == placed
    finally:
        node.remove()
