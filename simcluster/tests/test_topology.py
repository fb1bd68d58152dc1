"""Topology seeding: the sample serves the catalog's device classes and packages; generated and
YAML topologies produce NVIDIA-style nodes and ResourceSlices."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dracel import compile_selector, device_env, device_matches, quantity
from simcluster.allocator import (
    Allocator,
    ClaimRequest,
    Inventory,
    NodeState,
    Placement,
    PodRequest,
)
from simcluster.topology import TopologyError, gpu_uuid, load_topology

CATALOG_CLASSES = {
    "nvidia-rtx-3080": "NVIDIA GeForce RTX 3080",
    "nvidia-h100": "NVIDIA H100 80GB HBM3",
    "nvidia-l40s": "NVIDIA L40S",
}
# The classes NVIDIA's driver (MIG devices) and HAMi's (shared GPUs) install with their charts.
DRIVER_CLASSES = ("mig.nvidia.com", "hami-core-gpu.project-hami.io")


def _by_kind(seed: list[tuple[str, dict]]) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for resource, obj in seed:
        kinds.setdefault(resource, []).append(obj)
    return kinds


def _node_states(nodes: list[dict]) -> list[NodeState]:
    return [
        NodeState(
            name=n["metadata"]["name"],
            labels=n["metadata"]["labels"],
            cpu_free=int(n["status"]["allocatable"]["cpu"]) * 1000,
            memory_free=_bytes(n["status"]["allocatable"]["memory"]),
            pods_free=110,
        )
        for n in nodes
    ]


def _bytes(text: str) -> int:
    return quantity.parse_bytes(text)


def test_sample_topology_has_catalog_classes_when_loaded_without_source() -> None:
    kinds = _by_kind(load_topology(None))
    class_names = {c["metadata"]["name"] for c in kinds["deviceclasses"]}
    assert class_names == {"gpu.nvidia.com", *CATALOG_CLASSES, *DRIVER_CLASSES}
    assert {n["metadata"]["name"] for n in kinds["nodes"]} == {
        "gpu-node-rtx-0",
        "gpu-node-h100-0",
        "gpu-node-l40s-0",
        "gpu-node-shared-0",
        "gpu-node-mig-0",
        "gpu-node-mig-dynamic-0",
    }


def _whole_gpu_slices(slices: list[dict]) -> list[dict]:
    """The slices of whole GPUs (not the shared or MIG nodes' slices)."""
    return [
        s
        for s in slices
        if s["spec"]["driver"] == "gpu.nvidia.com"
        and s["spec"].get("devices")
        and all(d["attributes"]["type"] == {"string": "gpu"} for d in s["spec"]["devices"])
    ]


def test_sample_slices_are_nvidia_style_when_loaded() -> None:
    kinds = _by_kind(load_topology(None))
    assert len(_whole_gpu_slices(kinds["resourceslices"])) == 3
    for resource_slice in _whole_gpu_slices(kinds["resourceslices"]):
        spec = resource_slice["spec"]
        assert spec["driver"] == "gpu.nvidia.com"
        assert spec["pool"] == {"name": spec["nodeName"], "generation": 1, "resourceSliceCount": 1}
        assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
        device = spec["devices"][3]
        attributes = device["attributes"]
        assert attributes["type"] == {"string": "gpu"}
        assert attributes["uuid"] == {"string": gpu_uuid(spec["nodeName"], "gpu-3")}
        assert "index" not in attributes
        assert "minor" not in attributes
        assert "version" in attributes["driverVersion"]
        assert {"productName", "architecture"} <= set(attributes)
        assert "memory" in device["capacity"]


def test_sample_nodes_carry_capacity_labels_and_ready_condition() -> None:
    node = next(
        n for n in _by_kind(load_topology(None))["nodes"] if "h100" in n["metadata"]["name"]
    )
    assert node["status"]["allocatable"] == {
        "cpu": "192",
        "memory": "2Ti",
        "pods": "110",
        "ephemeral-storage": "500Gi",
    }
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-node-h100-0"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


def test_catalog_classes_select_only_their_product_when_evaluated() -> None:
    kinds = _by_kind(load_topology(None))
    classes = {c["metadata"]["name"]: c for c in kinds["deviceclasses"]}
    for resource_slice in _whole_gpu_slices(kinds["resourceslices"]):
        for device in resource_slice["spec"]["devices"]:
            env = device_env("gpu.nvidia.com", device)
            product = device["attributes"]["productName"]["string"]
            for name, device_class in classes.items():
                selectors = [
                    compile_selector(s["cel"]["expression"])
                    for s in device_class["spec"]["selectors"]
                ]
                expected = name == "gpu.nvidia.com" or CATALOG_CLASSES.get(name) == product
                assert device_matches(selectors, env) is expected, (name, product)


@pytest.mark.parametrize(
    ("device_class", "count", "cpu", "memory"),
    [
        ("nvidia-h100", 8, 128_000, 2**40),
        ("nvidia-l40s", 4, 48_000, 192 * 2**30),
        ("nvidia-rtx-3080", 2, 10_000, 40 * 2**30),
    ],
)
def test_sample_topology_fits_largest_catalog_package_when_allocated(
    device_class: str, count: int, cpu: int, memory: int
) -> None:
    kinds = _by_kind(load_topology(None))
    allocator = Allocator(
        Inventory(kinds["resourceslices"]),
        {c["metadata"]["name"]: c for c in kinds["deviceclasses"]},
        _node_states(kinds["nodes"]),
    )
    claim = ClaimRequest(
        "t", "c", [{"name": "gpu", "exactly": {"deviceClassName": device_class, "count": count}}]
    )
    outcome = allocator.place(PodRequest("t", "p", "uid", cpu=cpu, memory=memory, claims=[claim]))
    assert isinstance(outcome, Placement)
    assert len(outcome.devices) == count


PARTITIONABLE = {
    "products": {"H100": {"memory": "80Gi", "architecture": "Hopper"}},
    "deviceClasses": [
        {
            "name": "mig.nvidia.com",
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
            "cpu": "96",
            "memory": "1Ti",
            "migGpus": [{"product": "H100", "partitionable": True, "count": 2}],
        }
    ],
}


def test_partitionable_gpu_publishes_every_placement_with_counters_when_seeded() -> None:
    slices = _by_kind(load_topology(PARTITIONABLE))["resourceslices"]
    counters, *per_gpu = slices
    assert [s["spec"]["pool"]["resourceSliceCount"] for s in slices] == [3, 3, 3]
    assert "devices" not in counters["spec"]
    (first_set, _second) = counters["spec"]["sharedCounters"]
    assert first_set["name"] == "gpu-0-counter-set"
    assert set(first_set["counters"]) == {
        "memory",
        "multiprocessors",
        *(f"memory-slice-{n}" for n in range(8)),
    }
    devices = {d["name"]: d for d in per_gpu[0]["spec"]["devices"]}
    profiles = [
        d["attributes"]["profile"]["string"] for d in devices.values() if d["name"] != "gpu-0"
    ]
    assert {p: profiles.count(p) for p in set(profiles)} == {
        "1g.10gb": 7,
        "1g.20gb": 4,
        "2g.20gb": 3,
        "3g.40gb": 2,
        "4g.40gb": 1,
        "7g.80gb": 1,
    }
    assert list(devices) == sorted(devices)  # the driver publishes them sorted by name
    draws = devices["gpu-0-mig-3g40gb-9-4"]["consumesCounters"]
    assert draws == [
        {
            "counterSet": "gpu-0-counter-set",
            "counters": {
                "memory": {"value": "40Gi"},
                "multiprocessors": {"value": "60"},
                **{f"memory-slice-{n}": {"value": "1"} for n in (4, 5, 6, 7)},
            },
        }
    ]
    whole = devices["gpu-0"]
    assert whole["attributes"]["type"] == {"string": "gpu"}
    assert whole["consumesCounters"][0]["counters"] == first_set["counters"]
    parent = devices["gpu-0-mig-1g10gb-19-0"]["attributes"]["parentUUID"]
    assert parent == {"string": gpu_uuid("n", "gpu-0")} == whole["attributes"]["uuid"]


def _placed(allocator: Allocator, profiles: list[str]) -> list[str | None]:
    """Where one-device MIG claims of these profiles land, one pod after another."""
    placed: list[str | None] = []
    for number, profile in enumerate(profiles):
        expression = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
        exactly = {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": expression}}],
        }
        claim = ClaimRequest("t", f"c{number}", [{"name": "gpu", "exactly": exactly}])
        pod = PodRequest("t", f"p{number}", f"u{number}", cpu=1000, memory=1, claims=[claim])
        outcome = allocator.place(pod)
        if isinstance(outcome, Placement):
            allocator.commit(outcome, pod)
            placed.append(outcome.devices[0][2])
        else:
            placed.append(None)
    return placed


def test_partitionable_gpu_counters_decide_what_fits_when_allocated() -> None:
    kinds = _by_kind(load_topology(PARTITIONABLE))

    def allocator() -> Allocator:
        return Allocator(
            Inventory(kinds["resourceslices"]),
            {c["metadata"]["name"]: c for c in kinds["deviceclasses"]},
            _node_states(kinds["nodes"]),
        )

    def gpus(placed: list[str | None]) -> list[str | None]:
        return [name.split("-mig-")[0] if name else None for name in placed]

    # Seven 1g.10gb fit on a GPU (one memory slice each, slice 7 stays idle), then none.
    ones = _placed(allocator(), ["1g.10gb"] * 15)
    assert len(set(ones[:14])) == 14
    assert gpus(ones) == [gpus(ones)[0]] * 7 + [gpus(ones)[7]] * 7 + [None]
    assert gpus(ones)[0] != gpus(ones)[7]
    # A 7g takes every memory slice of its GPU: the next 1g goes to the other GPU.
    large, small = _placed(allocator(), ["7g.80gb", "1g.10gb"])
    assert str(large).endswith("-mig-7g80gb-0-0")
    assert gpus([small]) != gpus([large])
    assert small is not None
    # A 1g on slice 0 leaves the 2g placements at slices 2 and 4 of that GPU.
    placed = _placed(allocator(), ["1g.10gb", "2g.20gb", "2g.20gb", "2g.20gb"])
    first = gpus(placed)[0]
    assert placed[:3] == [
        f"{first}-mig-1g10gb-19-0",
        f"{first}-mig-2g20gb-14-2",
        f"{first}-mig-2g20gb-14-4",
    ]
    assert str(placed[3]).endswith("-mig-2g20gb-14-0")
    assert gpus(placed)[3] != first


def test_partitionable_gpus_have_a_slice_each_with_their_counters_when_1_34() -> None:
    # A 1.34 device draws only on counters of its own slice (the driver's combined slices).
    slices = _by_kind(load_topology(PARTITIONABLE, version="1.34"))["resourceslices"]
    assert [s["spec"]["pool"]["resourceSliceCount"] for s in slices] == [2, 2]
    for resource_slice in slices:
        (counter_set,) = resource_slice["spec"]["sharedCounters"]
        drawn = {
            c["counterSet"]
            for d in resource_slice["spec"]["devices"]
            for c in d["consumesCounters"]
        }
        assert drawn == {counter_set["name"]}
        assert len(resource_slice["spec"]["devices"]) == 19


def test_partitionable_gpu_takes_no_layout_when_seeded() -> None:
    spec = {**PARTITIONABLE, "nodes": [dict(PARTITIONABLE["nodes"][0])]}
    spec["nodes"][0]["migGpus"] = [
        {"product": "H100", "partitionable": True, "layout": ["1g.10gb"]}
    ]
    with pytest.raises(TopologyError, match="partitionable GPU takes no layout"):
        load_topology(spec)


def test_generated_topology_builds_identical_nodes_when_flags_given() -> None:
    seed = load_topology({"generate": {"nodes": 4, "gpus_per_node": 2, "product": "NVIDIA L40S"}})
    kinds = _by_kind(seed)
    assert [n["metadata"]["name"] for n in kinds["nodes"]] == [f"gpu-node-{i}" for i in range(4)]
    assert kinds["nodes"][0]["status"]["allocatable"]["cpu"] == "24"
    assert kinds["nodes"][0]["status"]["allocatable"]["memory"] == "192Gi"
    assert all(len(s["spec"]["devices"]) == 2 for s in kinds["resourceslices"])
    assert {"nvidia-l40s", "gpu.nvidia.com"} <= {
        c["metadata"]["name"] for c in kinds["deviceclasses"]
    }


def test_generated_topology_accepts_unknown_product_with_defaults() -> None:
    kinds = _by_kind(
        load_topology({"generate": {"nodes": 1, "gpus_per_node": 1, "product": "NVIDIA T4"}})
    )
    device = kinds["resourceslices"][0]["spec"]["devices"][0]
    assert device["attributes"]["productName"] == {"string": "NVIDIA T4"}
    assert device["capacity"]["memory"] == {"value": "16Gi"}


def test_yaml_topology_loads_when_given_a_path(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "nodes": [
                    {
                        "name": "n1",
                        "cpu": "16",
                        "memory": "64Gi",
                        "gpus": [
                            {"product": "X", "count": 130, "memory": "1Gi", "architecture": "Y"}
                        ],
                    }
                ],
                "deviceClasses": [{"name": "x", "selector": "device.driver == 'gpu.nvidia.com'"}],
            }
        )
    )
    kinds = _by_kind(load_topology(str(path)))
    # More than 128 devices need a pool of several slices.
    assert [len(s["spec"]["devices"]) for s in kinds["resourceslices"]] == [128, 2]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in kinds["resourceslices"]} == {2}
    assert kinds["deviceclasses"][0]["spec"]["selectors"] == [
        {"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}
    ]


@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ({"nodes": [{"cpu": "1"}]}, "missing 'name'"),
        ({"nodes": [{"name": "a"}, {"name": "a"}]}, "duplicate node name"),
        ({"nodes": [{"name": "a", "cpu": "lots"}]}, "invalid cpu"),
        ({"deviceClasses": [{"name": "c", "selector": "device.("}]}, "CEL compile error"),
    ],
)
def test_load_topology_raises_clear_error_when_input_is_invalid(
    topology: dict, message: str
) -> None:
    with pytest.raises(TopologyError, match=message):
        load_topology(topology)


def test_gpu_uuid_is_deterministic_when_regenerated() -> None:
    assert gpu_uuid("n", "gpu-0") == gpu_uuid("n", "gpu-0") != gpu_uuid("n", "gpu-1")
    assert gpu_uuid("n", "gpu-0").startswith("GPU-")
