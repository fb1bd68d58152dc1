"""Partitionable devices (dynamic MIG: every placement published, shared counters decide what
fits) in the mirror: each pool's counter sets with what allocated devices left of them, and
each device's consumesCounters."""

from __future__ import annotations

from typing import Any

from inventory import observe
from simcluster.allocator import (
    Allocator,
    ClaimRequest,
    Inventory,
    NodeState,
    Placement,
    PodRequest,
)
from simcluster.topology import load_topology

MIG = "mig.nvidia.com"
NODE_CPU = 96


def topology(gpus: int = 1, cpu: int = NODE_CPU) -> list[tuple[str, dict]]:
    return load_topology(
        {
            "products": {"NVIDIA H100 80GB HBM3": {"memory": "80Gi", "architecture": "Hopper"}},
            "deviceClasses": [
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
            ],
            "nodes": [
                {
                    "name": "n",
                    "cpu": str(cpu),
                    "memory": "1Ti",
                    "migGpus": [
                        {"product": "NVIDIA H100 80GB HBM3", "partitionable": True, "count": gpus}
                    ],
                }
            ],
        }
    )


def kinds(seed: list[tuple[str, dict]]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for resource, obj in seed:
        found.setdefault(resource, []).append(obj)
    return found


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


class Cluster:
    """The simulated cluster's allocator over a topology, placing one pod per unit as the
    scheduler does, and the claims it allocated as the sync would list them."""

    def __init__(self, seed: list[tuple[str, dict]]) -> None:
        self.kinds = kinds(seed)
        self.allocator = Allocator(
            Inventory(self.kinds["resourceslices"]),
            {c["metadata"]["name"]: c for c in self.kinds.get("deviceclasses", [])},
            [
                NodeState(
                    name=n["metadata"]["name"],
                    cpu_free=int(n["status"]["allocatable"]["cpu"]) * 1000,
                    memory_free=1 << 40,
                )
                for n in self.kinds["nodes"]
            ],
        )
        self.claims: list[dict] = []
        self.pods: list[dict] = []

    def place(self, spec: observe.PackageSpec) -> str | None:
        """A unit of the package: its first device, or None when the allocator finds no fit."""
        number = len(self.claims) + len(self.pods)
        exactly: dict[str, Any] = {"deviceClassName": spec.device_class_name, "count": spec.count}
        if spec.selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in spec.selectors]
        constraints = (
            [{"requests": ["gpu"], "matchAttribute": spec.match_attribute}]
            if spec.match_attribute
            else []
        )
        claim = ClaimRequest(
            "t", f"c{number}", [{"name": "gpu", "exactly": exactly}], constraints=constraints
        )
        pod = PodRequest(
            "t", f"p{number}", f"u{number}", cpu=spec.cpu_millicores, memory=1 << 30, claims=[claim]
        )
        outcome = self.allocator.place(pod)
        if not isinstance(outcome, Placement):
            return None
        self.allocator.commit(outcome, pod)
        self.claims.append(
            {
                "metadata": {"name": f"c{number}", "namespace": "t", "uid": f"c{number}"},
                "status": {"allocation": outcome.allocations[f"c{number}"]},
            }
        )
        self.pods.append(
            {
                "spec": {
                    "nodeName": outcome.node,
                    "containers": [
                        {
                            "resources": {
                                "requests": {"cpu": f"{spec.cpu_millicores}m", "memory": "1Gi"}
                            }
                        }
                    ],
                },
                "status": {"phase": "Running"},
            }
        )
        return outcome.devices[0][2]

    def observe(self, packages: list[observe.PackageSpec]) -> observe.Observation:
        return observe.observe(
            nodes=self.kinds["nodes"],
            device_classes=self.kinds.get("deviceclasses", []),
            slices=self.kinds["resourceslices"],
            claims=self.claims,
            pods=self.pods,
            quotas=[],
            packages=packages,
        )


def test_counter_sets_are_mirrored_with_what_allocated_devices_left():
    cluster = Cluster(topology())
    cluster.place(package("3g.40gb"))
    observation = cluster.observe([])
    document = observe.build_document(observation)
    (counter_set,) = document["counterSets"]
    assert {k: counter_set[k] for k in ("driver", "pool", "name", "nodeName")} == {
        "driver": "gpu.nvidia.com",
        "pool": "n",
        "name": "gpu-0-counter-set",
        "nodeName": "n",
    }
    shown = counter_set["counters"]
    assert shown["memory"] == {"total": "80Gi", "remaining": "40Gi"}
    assert shown["multiprocessors"] == {"total": "132", "remaining": "72"}
    assert shown["memory-slice-0"] == {"total": "1", "remaining": "0"}
    assert shown["memory-slice-4"] == {"total": "1", "remaining": "1"}
    pool = observation.pools[("gpu.nvidia.com", "n")]
    assert pool["counter_sets"] == [{"name": "gpu-0-counter-set", "counters": shown}]
    device = observation.devices[("gpu.nvidia.com", "n", "gpu-0-mig-3g40gb-9-4")]
    assert device["consumes_counters"][0]["counterSet"] == "gpu-0-counter-set"


def test_devices_without_counters_have_no_counter_sets():
    observation = Cluster(
        load_topology({"nodes": [{"name": "m", "gpus": [{"product": "X", "count": 2}]}]})
    ).observe([])
    assert observe.build_document(observation)["counterSets"] == []
    assert all(d["consumes_counters"] == [] for d in observation.devices.values())
