"""Consumable capacity, shared counters and constraints over HTTP, on the drivers' own demo
scenarios (rewritten here, each naming its source) with the outcome a 1.36 cluster gives."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from kubernetes import client

from dracel.quantity import parse as parse_quantity
from simcluster.cluster import SimCluster
from simcluster.tests.conftest import wait_until

DRIVER = "gpu.example.com"


class Env:
    """A namespace, one node and a device class matching only this test's driver pool."""

    def __init__(self, sim: SimCluster, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.resource = client.ResourceV1Api(api)
        tag = uuid.uuid4().hex[:8]
        self.tag = tag
        self.namespace = f"share-{tag}"
        self.node = f"node-{tag}"
        self.driver = f"{tag}.{DRIVER}"
        self.device_class = self.driver
        self.sim = sim
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        sim.store.create(
            "nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node}},
                "status": {
                    "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
            internal=True,
        )
        self.resource.create_device_class(
            {
                "metadata": {"name": self.device_class},
                "spec": {
                    "selectors": [{"cel": {"expression": f"device.driver == '{self.driver}'"}}]
                },
            }
        )
        self.slices: list[str] = []

    def publish(self, *specs: dict[str, Any]) -> None:
        """One pool (named after the node) of len(specs) slices."""
        for number, spec in enumerate(specs):
            name = f"{self.node}-{number}"
            self.resource.create_resource_slice(
                {
                    "metadata": {"name": name},
                    "spec": {
                        "driver": self.driver,
                        "nodeName": self.node,
                        "pool": {
                            "name": self.node,
                            "generation": 1,
                            "resourceSliceCount": len(specs),
                        },
                        **spec,
                    },
                }
            )
            self.slices.append(name)

    def claim(self, name: str, requests: list[dict[str, Any]], **devices: Any) -> None:
        for request in requests:
            for exact in [request.get("exactly"), *(request.get("firstAvailable") or [])]:
                if exact is not None:
                    exact.setdefault("deviceClassName", self.device_class)
        self.resource.create_namespaced_resource_claim(
            self.namespace,
            {"metadata": {"name": name}, "spec": {"devices": {"requests": requests, **devices}}},
        )

    def pod(self, name: str, claim: str) -> None:
        self.core.create_namespaced_pod(
            self.namespace,
            {
                "metadata": {"name": name},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                    "containers": [
                        {
                            "name": "ctr0",
                            "image": "ubuntu:22.04",
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                },
            },
        )

    def running(self, name: str) -> client.V1Pod:
        return wait_until(
            lambda: self.core.read_namespaced_pod(name, self.namespace),
            lambda p: p.status.phase == "Running",
            f"pod {name} Running",
        )

    def unschedulable(self, name: str) -> str:
        def message() -> str | None:
            pod = self.core.read_namespaced_pod(name, self.namespace)
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.status == "False":
                    return str(condition.message)
            return None

        return wait_until(message, lambda m: m is not None, f"pod {name} unschedulable") or ""

    def results(self, claim: str) -> list[dict[str, Any]]:
        read = self.resource.read_namespaced_resource_claim(claim, self.namespace)
        raw = client.ApiClient().sanitize_for_serialization(read)
        return list(raw["status"]["allocation"]["devices"]["results"])

    def close(self) -> None:
        self.core.delete_namespace(self.namespace)
        for name in self.slices:
            self.resource.delete_resource_slice(name)
        self.resource.delete_device_class(self.device_class)
        self.core.delete_node(self.node)


@pytest.fixture
def env(sim: SimCluster, kube_api: client.ApiClient) -> Iterator[Env]:
    made = Env(sim, kube_api)
    yield made
    made.close()


def _range(value: str, minimum: str, step: str) -> dict[str, Any]:
    return {
        "value": value,
        "requestPolicy": {
            "default": value,
            "validRange": {"min": minimum, "step": step, "max": value},
        },
    }


def _example_gpu(index: int, **extra: Any) -> dict[str, Any]:
    """A GPU as dra-example-driver's gpu profile publishes it with
    gpuAllowMultipleAllocations=true (internal/profiles/gpu/gpu.go)."""
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "index": {"int": index},
            "uuid": {"string": f"gpu-{index}-uuid"},
            "model": {"string": "LATEST-GPU-MODEL"},
            "driverVersion": {"version": "1.0.0"},
        },
        "allowMultipleAllocations": True,
        "capacity": {"memory": _range("80Gi", "1Gi", "1Gi"), "compute": _range("100", "1", "1")},
        **extra,
    }


def test_two_claims_share_one_gpu_by_capacity(env: Env) -> None:
    """dra-example-driver demo/examples/gpu-allow-multiple-allocations: two pods, each claim
    asking 16Gi memory and 20 compute, both on the one GPU, each with its own share."""
    env.publish({"devices": [_example_gpu(0)]})
    for number in (0, 1):
        env.claim(
            f"shared-gpu-pod{number}",
            [
                {
                    "name": "gpu",
                    "exactly": {"capacity": {"requests": {"memory": "16Gi", "compute": "20"}}},
                }
            ],
        )
        env.pod(f"pod{number}", f"shared-gpu-pod{number}")
    for number in (0, 1):
        env.running(f"pod{number}")
    first, second = env.results("shared-gpu-pod0"), env.results("shared-gpu-pod1")
    assert [r["device"] for r in first + second] == ["gpu-0", "gpu-0"]
    assert first[0]["consumedCapacity"] == {"memory": "16Gi", "compute": "20"}
    assert first[0]["shareID"] != second[0]["shareID"]
    uuid.UUID(first[0]["shareID"])


def test_shares_fill_a_gpu_then_the_next_is_unschedulable(env: Env) -> None:
    """Four quarter shares fit a 100-compute GPU; a fifth does not, with the real message."""
    env.publish({"devices": [_example_gpu(0)]})
    for number in range(5):
        env.claim(
            f"quarter-{number}",
            [
                {
                    "name": "gpu",
                    "exactly": {"capacity": {"requests": {"compute": "25", "memory": "20Gi"}}},
                }
            ],
        )
        env.pod(f"quarter-{number}", f"quarter-{number}")
    for number in range(4):
        env.running(f"quarter-{number}")
    message = env.unschedulable("quarter-4")
    assert "cannot allocate all claims" in message
    assert message.startswith("0/")
    total = sum(
        (
            parse_quantity(env.results(f"quarter-{n}")[0]["consumedCapacity"]["compute"])
            for n in range(4)
        ),
        Decimal(0),
    )
    assert total == 100
    env.core.delete_namespaced_pod("quarter-0", env.namespace)
    env.running("quarter-4")


def test_request_policy_defaults_and_rounds_up_by_step(env: Env) -> None:
    """No request for a capacity → the policy's default (the whole GPU here); a request off the
    step → rounded up from min by step; below min → min."""
    gpu = _example_gpu(0)
    gpu["capacity"]["memory"] = _range("80Gi", "2Gi", "4Gi")
    gpu["capacity"]["compute"] = {
        "value": "100",
        "requestPolicy": {"default": "10", "validValues": ["10", "50", "100"]},
    }
    env.publish({"devices": [gpu]})
    env.claim("odd", [{"name": "gpu", "exactly": {"capacity": {"requests": {"memory": "7Gi"}}}}])
    env.pod("odd", "odd")
    env.running("odd")
    assert env.results("odd")[0]["consumedCapacity"] == {"memory": "10Gi", "compute": "10"}
    env.claim(
        "small",
        [
            {
                "name": "gpu",
                "exactly": {"capacity": {"requests": {"memory": "1Gi", "compute": "20"}}},
            }
        ],
    )
    env.pod("small", "small")
    env.running("small")
    assert env.results("small")[0]["consumedCapacity"] == {"memory": "2Gi", "compute": "50"}


def test_capacity_beyond_every_device_is_unschedulable(env: Env) -> None:
    env.publish({"devices": [_example_gpu(0)]})
    env.claim("huge", [{"name": "gpu", "exactly": {"capacity": {"requests": {"memory": "81Gi"}}}}])
    env.pod("huge", "huge")
    assert "cannot allocate all claims" in env.unschedulable("huge")


def _partition(
    gpu: int, part: int, memory: str, compute: str, *, full: bool = False
) -> dict[str, Any]:
    name = f"gpu-{gpu}-full" if full else f"gpu-{gpu}-partition-{part}"
    attributes: dict[str, Any] = {
        "index": {"int": gpu},
        "uuid": {"string": f"gpu-{gpu}-uuid"},
        "partitionable": {"bool": True},
    }
    if full:
        attributes["full"] = {"bool": True}
    else:
        attributes["partition"] = {"int": part}
    return {
        "name": name,
        "attributes": attributes,
        "capacity": {"memory": {"value": memory}, "compute": {"value": compute}},
        "consumesCounters": [
            {
                "counterSet": f"gpu-{gpu}-counters",
                "counters": {"memory": {"value": memory}, "compute": {"value": compute}},
            }
        ],
    }


def _partitioned_gpus(count: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """dra-example-driver's gpu profile with kubeletPlugin.gpuPartitions=4: a counters-only
    slice, then a slice of four quarter partitions and one full device per GPU."""
    counters = {
        "sharedCounters": [
            {
                "name": f"gpu-{gpu}-counters",
                "counters": {"memory": {"value": "80Gi"}, "compute": {"value": "100"}},
            }
            for gpu in range(count)
        ]
    }
    devices = [
        device
        for gpu in range(count)
        for device in [
            *(_partition(gpu, part, "20Gi", "25") for part in range(4)),
            _partition(gpu, 0, "80Gi", "100", full=True),
        ]
    ]
    return counters, {"devices": devices}


def test_partitions_never_exceed_their_counter_set(env: Env) -> None:
    """dra-example-driver demo/examples/partitionable-devices: a pod asking two partitions
    gets them; once a full GPU is taken, its partitions are not, and vice versa."""
    env.publish(*_partitioned_gpus(1))
    partitions = "!has(device.attributes['" + env.driver + "'].full)"
    env.claim(
        "gpu-partitions",
        [
            {
                "name": "gpu-partition",
                "exactly": {"count": 2, "selectors": [{"cel": {"expression": partitions}}]},
            }
        ],
    )
    env.pod("pod0", "gpu-partitions")
    env.running("pod0")
    assert [r["device"] for r in env.results("gpu-partitions")] == [
        "gpu-0-partition-0",
        "gpu-0-partition-1",
    ]
    full = "has(device.attributes['" + env.driver + "'].full)"
    env.claim("whole", [{"name": "gpu", "exactly": {"selectors": [{"cel": {"expression": full}}]}}])
    env.pod("whole", "whole")
    assert "cannot allocate all claims" in env.unschedulable("whole")
    env.claim(
        "rest",
        [
            {
                "name": "gpu",
                "exactly": {"count": 3, "selectors": [{"cel": {"expression": partitions}}]},
            }
        ],
    )
    env.pod("rest", "rest")
    assert "cannot allocate all claims" in env.unschedulable("rest")
    env.core.delete_namespaced_pod("rest", env.namespace)
    env.core.delete_namespaced_pod("pod0", env.namespace)
    env.running("whole")


def _mig(gpu: int, profile: str, index: int, memory: str, multiprocessors: str) -> dict[str, Any]:
    """A static MIG device as NVIDIA's driver publishes it (type mig, profile, parentUUID)."""
    return {
        "name": f"gpu-{gpu}-mig-{profile.split('.')[0]}-{index}",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "parentUUID": {"string": f"GPU-{gpu}"},
            "uuid": {"string": f"MIG-{gpu}-{profile}-{index}"},
        },
        "capacity": {"memory": {"value": memory}, "multiprocessors": {"value": multiprocessors}},
    }


def test_match_attribute_puts_a_1g_and_a_3g_slice_on_one_gpu(env: Env) -> None:
    """The issue's MIG case (static MIG devices with profile and parentUUID as NVIDIA's driver
    publishes them; not one of its demo files): a 1g and a 3g device constrained to one
    parentUUID. GPU 0 has a 1g slice only, GPU 1 both: first-fit would take GPU 0's 1g and
    fail; the search backtracks to GPU 1."""
    env.publish(
        {
            "devices": [
                _mig(0, "1g.10gb", 0, "10Gi", "14"),
                _mig(1, "1g.10gb", 0, "10Gi", "14"),
                _mig(1, "3g.40gb", 0, "40Gi", "42"),
            ]
        }
    )

    def profile(name: str) -> list[dict[str, Any]]:
        return [{"cel": {"expression": f"device.attributes['{env.driver}'].profile == '{name}'"}}]

    env.claim(
        "mig-pair",
        [
            {"name": "small", "exactly": {"selectors": profile("1g.10gb")}},
            {"name": "large", "exactly": {"selectors": profile("3g.40gb")}},
        ],
        constraints=[{"requests": [], "matchAttribute": f"{env.driver}/parentUUID"}],
    )
    env.pod("mig", "mig-pair")
    env.running("mig")
    assert {r["request"]: r["device"] for r in env.results("mig-pair")} == {
        "small": "gpu-1-mig-1g-0",
        "large": "gpu-1-mig-3g-0",
    }


def test_match_attribute_that_cannot_hold_is_unschedulable(env: Env) -> None:
    env.publish(
        {"devices": [_mig(0, "1g.10gb", 0, "10Gi", "14"), _mig(1, "3g.40gb", 0, "40Gi", "42")]}
    )
    env.claim(
        "apart",
        [
            {"name": "small", "exactly": {}},
            {"name": "large", "exactly": {}},
        ],
        constraints=[{"matchAttribute": f"{env.driver}/parentUUID"}],
    )
    env.pod("apart", "apart")
    assert "cannot allocate all claims" in env.unschedulable("apart")


def test_distinct_attribute_spreads_two_shares_over_two_gpus(env: Env) -> None:
    """distinctAttribute (DRAConsumableCapacity): two shares of one request on different
    GPUs, though one GPU has room for both."""
    env.publish({"devices": [_example_gpu(0), _example_gpu(1)]})
    env.claim(
        "spread",
        [{"name": "gpu", "exactly": {"count": 2, "capacity": {"requests": {"compute": "10"}}}}],
        constraints=[{"requests": ["gpu"], "distinctAttribute": f"{env.driver}/uuid"}],
    )
    env.pod("spread", "spread")
    env.running("spread")
    assert sorted(r["device"] for r in env.results("spread")) == ["gpu-0", "gpu-1"]
