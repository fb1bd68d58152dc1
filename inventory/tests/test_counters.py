"""Availability on partitionable devices (dynamic MIG: every placement published, shared counters
decide what fits): the mirror's counter sets, and placeable units counted as the simulated
cluster's allocator places them, checked against that allocator itself."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

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
PARENT = "gpu.nvidia.com/parentUUID"
PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
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


WHOLE = observe.PackageSpec("h100", "gpu.nvidia.com", (), 1, 1000, 1 << 30)


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

    def availability(self, spec: observe.PackageSpec) -> dict:
        return observe.package_availability(self.observe([spec]), [spec])[spec.id]


def test_a_7g_leaves_no_1g_placeable_on_its_gpu():
    cluster = Cluster(topology())
    assert cluster.place(package("7g.80gb")) == "gpu-0-mig-7g80gb-0-0"
    one_g = package("1g.10gb")
    shown = cluster.availability(one_g)
    # Seven 1g.10gb devices are unallocated, but each needs a memory slice the 7g holds.
    assert shown == {
        "placeable": 0,
        "free_devices": 0,
        "reason": "the free devices of class mig.nvidia.com need counters already consumed "
        "(gpu-0-counter-set on n)",
    }
    assert cluster.place(one_g) is None


def test_a_1g_leaves_two_of_the_three_2g_placements():
    cluster = Cluster(topology())
    assert cluster.place(package("1g.10gb")) == "gpu-0-mig-1g10gb-19-0"
    two_g = package("2g.20gb")
    assert cluster.availability(two_g)["placeable"] == 2  # slices 2-3 and 4-5; 0-1 is taken
    assert cluster.availability(package("1g.10gb"))["placeable"] == 6
    # The whole GPU draws every counter: any MIG device in use keeps it off.
    whole = cluster.availability(WHOLE)
    assert whole["placeable"] == 0
    assert "need counters already consumed" in whole["reason"]
    assert [cluster.place(two_g) for _ in range(3)] == [
        "gpu-0-mig-2g20gb-14-2",
        "gpu-0-mig-2g20gb-14-4",
        None,
    ]


def test_two_devices_that_do_not_fit_together_are_no_unit():
    cluster = Cluster(topology())
    cluster.place(package("3g.40gb"))  # slices 0-3
    pair = package("3g.40gb", count=2)
    # The 3g at slice 4 still fits, alone: a unit of two has nowhere to go.
    assert cluster.availability(pair) == {
        "placeable": 0,
        "free_devices": 1,
        "reason": "no node has 2 free matching devices whose counters fit together",
    }
    assert cluster.place(pair) is None


def test_units_are_the_fewer_of_what_counters_and_cpu_allow():
    cluster = Cluster(topology(cpu=5))
    cluster.place(package("3g.40gb"))  # slices 0-3 and one cpu
    # Four cpus are left, but only slices 4, 5 and 6 take a 1g.10gb.
    assert cluster.availability(package("1g.10gb"))["placeable"] == 3
    roomy = Cluster(topology(cpu=3))
    assert roomy.availability(package("1g.10gb"))["placeable"] == 3  # seven fit, three cpus


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
def test_placeable_now_is_what_the_allocator_places(before, target):
    """However the GPUs are already carved up, placeableNow is how many more units of the
    package the allocator places, one after another."""
    cluster = Cluster(topology(gpus=2, cpu=10))
    for spec in before:
        cluster.place(spec)
    expected = cluster.availability(target)["placeable"]
    placed = 0
    while cluster.place(target) is not None:
        placed += 1
    assert expected == placed
