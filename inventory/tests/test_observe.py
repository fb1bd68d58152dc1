"""Pure inventory rules: pool generations and completeness, class membership through CEL,
allocation, node headroom, device taints, package availability."""

from hypothesis import given, settings
from hypothesis import strategies as st

import dracel
from inventory import observe

DRIVER = "gpu.nvidia.com"
RTX_CLASS = {
    "metadata": {"name": "nvidia-rtx-3080"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.attributes['gpu.nvidia.com'].productName"
                    " == 'NVIDIA GeForce RTX 3080'"
                }
            }
        ]
    },
}


def gpu(index: int, product: str = "NVIDIA GeForce RTX 3080", memory: str = "10Gi") -> dict:
    return {
        "name": f"gpu-{index}",
        "attributes": {"productName": {"string": product}, "type": {"string": "gpu"}},
        "capacity": {"memory": {"value": memory}},
    }


def slice_(node: str, devices: list[dict], *, generation: int = 1, count: int = 1, name=None):
    return {
        "metadata": {"name": name or f"{node}-slice-{generation}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            "devices": devices,
        },
    }


def node(name: str, cpu: str = "64", memory: str = "256Gi", ready: bool = True) -> dict:
    return {
        "metadata": {"name": name, "labels": {}},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def claim(name: str, node_name: str, devices: list[str], namespace: str = "ns") -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": name},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": d}
                        for d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node_name]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
        },
    }


def pod(node_name: str, cpu: str, memory: str, phase: str = "Running") -> dict:
    return {
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        },
        "status": {"phase": phase},
    }


RTX2 = observe.PackageSpec("rtx-2x", "nvidia-rtx-3080", (), 2, 10_000, 40 << 30)


def run(**overrides) -> observe.Observation:
    inputs = {
        "nodes": [node("n1"), node("n2")],
        "device_classes": [RTX_CLASS],
        "slices": [
            slice_("n1", [gpu(i) for i in range(4)]),
            slice_("n2", [gpu(i) for i in range(4)]),
        ],
        "claims": [],
        "pods": [],
        "quotas": [],
        "packages": [RTX2],
    }
    inputs.update(overrides)
    return observe.observe(**inputs)


def test_devices_match_their_class_through_cel():
    observation = run(slices=[slice_("n1", [gpu(0), gpu(1, product="NVIDIA L40S")])])
    classes = {key[2]: d["device_classes"] for key, d in observation.devices.items()}
    assert classes == {"gpu-0": ["nvidia-rtx-3080"], "gpu-1": []}


def test_only_the_latest_generation_counts():
    observation = run(
        slices=[
            slice_("n1", [gpu(i) for i in range(4)], generation=1),
            slice_("n1", [gpu(i) for i in range(2)], generation=2),
        ]
    )
    assert len(observation.devices) == 2
    assert observation.pools[(DRIVER, "n1")]["generation"] == 2
    assert observation.slice_count == 2  # every ResourceSlice object is counted


def test_incomplete_pool_is_visible_but_not_counted_in_totals():
    observation = run(slices=[slice_("n1", [gpu(0), gpu(1)], count=2)])
    pool = observation.pools[(DRIVER, "n1")]
    assert (pool["complete"], pool["slices_seen"], pool["slice_count"]) == (False, 1, 2)
    document = observe.build_document(observation)
    assert document["totalGpuAllocatable"] == 0
    assert len(observation.devices) == 2  # ExactCount may still use them, as the allocator does


def test_document_counts_allocations():
    observation = run(
        claims=[
            claim("c1", "n1", ["gpu-0", "gpu-1"]),
            {"metadata": {"name": "c2", "namespace": "ns"}, "status": {}},
        ]
    )
    document = observe.build_document(observation)
    assert document["totalGpuAllocatable"] == 8
    assert document["draClaimCount"] == 2
    assert document["draAllocatedClaims"] == 1
    assert document["draAllocatedDevices"] == 2
    assert document["draResourceSlices"] == 2
    assert document["draDevices"][0] == {
        "claimName": "c1",
        "namespace": "ns",
        "request": "gpu",
        "driver": DRIVER,
        "pool": "n1",
        "device": "gpu-0",
    }
    assert document["deviceClasses"] == [
        {"name": "nvidia-rtx-3080", "total": 8, "allocated": 2, "tainted": 0, "free": 6}
    ]
    assert document["nodes"][0]["name"] == "n1"
    assert (document["nodes"][0]["allocated"], document["nodes"][0]["free"]) == (2, 2)


def taint(key: str, effect: str = "NoExecute", value: str = "") -> dict:
    return {"key": key, "value": value, "effect": effect, "timeAdded": "2026-01-01T00:00:00Z"}


def rule(name: str, selector: dict | None, effect: str = "NoSchedule") -> dict:
    spec: dict = {"taint": taint(f"rule.example.com/{name}", effect)}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"metadata": {"name": name}, "spec": spec}


def test_slice_and_rule_taints_are_mirrored_with_where_they_come_from():
    own = {**gpu(0), "taints": [taint("gpu.nvidia.com/xid", value="79")]}
    observation = run(
        slices=[slice_("n1", [own, gpu(1)], name="n1-gpus")],
        device_taint_rules=[
            rule("drain-n1-gpu-0", {"driver": DRIVER, "pool": "n1", "device": "gpu-0"}),
            rule("elsewhere", {"pool": "n9"}),
        ],
    )

    assert observation.devices[(DRIVER, "n1", "gpu-0")]["taints"] == [
        {
            "key": "gpu.nvidia.com/xid",
            "value": "79",
            "effect": "NoExecute",
            "timeAdded": "2026-01-01T00:00:00Z",
            "source": "ResourceSlice/n1-gpus",
        },
        {
            "key": "rule.example.com/drain-n1-gpu-0",
            "value": "",
            "effect": "NoSchedule",
            "timeAdded": "2026-01-01T00:00:00Z",
            "source": "DeviceTaintRule/drain-n1-gpu-0",
        },
    ]
    assert observation.devices[(DRIVER, "n1", "gpu-0")]["tainted"]
    assert observation.devices[(DRIVER, "n1", "gpu-1")]["taints"] == []
    assert not observation.devices[(DRIVER, "n1", "gpu-1")]["tainted"]


def test_rules_select_by_class_and_cel_as_the_scheduler_does():
    product = "device.attributes['gpu.nvidia.com'].productName"
    observation = run(
        slices=[slice_("n1", [gpu(0), gpu(1, product="NVIDIA L40S")])],
        device_taint_rules=[
            rule("rtx", {"deviceClassName": "nvidia-rtx-3080"}),
            rule("no-such-class", {"deviceClassName": "nvidia-b200"}),
            rule("l40s", {"selectors": [{"cel": {"expression": f"{product} == 'NVIDIA L40S'"}}]}),
            rule("broken", {"selectors": [{"cel": {"expression": "device.attributes["}}]}),
        ],
    )
    sources = {key[2]: [t["source"] for t in d["taints"]] for key, d in observation.devices.items()}

    assert sources == {"gpu-0": ["DeviceTaintRule/rtx"], "gpu-1": ["DeviceTaintRule/l40s"]}


def test_a_rule_without_selector_taints_every_device_as_1_34_does():
    observation = run(device_taint_rules=[rule("everything", None)])

    assert all(d["tainted"] for d in observation.devices.values())
    assert len(observation.devices) == 8


def test_tainted_devices_are_never_free_and_are_listed():
    observation = run(
        claims=[claim("c1", "n1", ["gpu-0"])],
        device_taint_rules=[
            rule("n1-0", {"pool": "n1", "device": "gpu-0"}, effect="NoExecute"),
            rule("n1-1", {"pool": "n1", "device": "gpu-1"}),
        ],
    )
    document = observe.build_document(observation)

    assert document["deviceClasses"] == [
        {"name": "nvidia-rtx-3080", "total": 8, "allocated": 1, "tainted": 2, "free": 6}
    ]
    n1 = document["nodes"][0]
    assert (n1["name"], n1["allocated"], n1["tainted"], n1["free"]) == ("n1", 1, 2, 2)
    assert document["draTaintedDevices"] == 2
    assert [(d["device"], d["allocated"], d["claim"]) for d in document["taintedDevices"]] == [
        ("gpu-0", True, "ns/c1"),
        ("gpu-1", False, None),
    ]
    assert document["taintedDevices"][0]["taints"][0]["effect"] == "NoExecute"


def test_availability_skips_tainted_devices_and_says_when_they_are_why():
    # n1: 4 GPUs, 3 tainted -> 1 free; n2: 4 GPUs, all tainted.
    observation = run(
        device_taint_rules=[
            rule("n2", {"pool": "n2"}),
            *(rule(f"n1-{i}", {"pool": "n1", "device": f"gpu-{i}"}) for i in range(3)),
        ]
    )
    everything = run(device_taint_rules=[rule("all", {"driver": DRIVER})])

    assert observe.package_availability(observation, [RTX2])["rtx-2x"] == {
        "placeable": 0,
        "free_devices": 1,
        "reason": "no node has 2 free matching devices: 7 matching devices are tainted",
    }
    assert observe.package_availability(everything, [RTX2])["rtx-2x"] == {
        "placeable": 0,
        "free_devices": 0,
        "reason": "no free devices match device class nvidia-rtx-3080: "
        "8 matching devices are tainted",
    }


def test_availability_counts_node_by_node():
    # n1: 4 free -> 2 units; n2: 3 free (one taken) -> 1 unit. Devices never pool across nodes.
    observation = run(claims=[claim("c1", "n2", ["gpu-0"])])
    availability = observe.package_availability(observation, [RTX2])
    assert availability["rtx-2x"] == {"placeable": 3, "free_devices": 7, "reason": ""}


def test_availability_is_bounded_by_node_cpu_and_memory():
    observation = run(
        pods=[
            pod("n1", "60", "1Gi"),
            pod("n2", "1", "230Gi"),
            pod("n2", "50", "1Gi", phase="Succeeded"),
        ]
    )
    # n1 has 4 cpu left (< 10); n2 has 26Gi memory left (< 40Gi).
    availability = observe.package_availability(observation, [RTX2])["rtx-2x"]
    assert availability["placeable"] == 0
    assert "cpu or memory" in availability["reason"]
    assert observation.nodes["n1"]["cpu_requested_millicores"] == 60_000


def test_availability_zero_with_reason_when_no_node_has_enough_devices():
    big = observe.PackageSpec("rtx-8x", "nvidia-rtx-3080", (), 8, 1000, 1 << 30)
    assert observe.package_availability(run(packages=[big]), [big])["rtx-8x"] == {
        "placeable": 0,
        "free_devices": 8,
        "reason": "no node has 8 free matching devices",
    }
    ghost = observe.PackageSpec("ghost", "nvidia-b200", (), 1, 1000, 1 << 30)
    reason = observe.package_availability(run(packages=[ghost]), [ghost])["ghost"]["reason"]
    assert reason == "device class nvidia-b200 does not exist"


def test_package_selectors_narrow_the_devices():
    picky = observe.PackageSpec(
        "rtx-big",
        "nvidia-rtx-3080",
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('12Gi')) >= 0",),
        1,
        1,
        1,
    )
    observation = run(slices=[slice_("n1", [gpu(0), gpu(1, memory="16Gi")])], packages=[picky])
    assert observe.package_availability(observation, [picky])["rtx-big"]["placeable"] == 1


def test_unchanged_devices_reuse_membership_without_cel():
    first = run(slices=[slice_("n1", [gpu(i, product=f"P{i}") for i in range(4)])])
    assert first.evaluated_devices == 4
    previous = {
        k: (d["content_hash"], d["device_classes"], d["packages"]) for k, d in first.devices.items()
    }
    again = run(
        slices=[slice_("n1", [gpu(i, product=f"P{i}") for i in range(4)])],
        previous_membership=previous,
    )
    assert again.evaluated_devices == 0
    changed_class = {**RTX_CLASS, "spec": {"selectors": []}}
    assert run(device_classes=[changed_class], previous_membership=previous).evaluated_devices == 1


def with_uuid(device: dict, index: int) -> dict:
    attributes = {
        **device["attributes"],
        "uuid": {"string": f"GPU-{index}"},
        "index": {"int": index},
    }
    return {**device, "attributes": attributes}


def test_devices_alike_to_the_selectors_share_one_evaluation():
    devices = [with_uuid(gpu(i), i) for i in range(6)] + [
        with_uuid(gpu(6, product="NVIDIA L40S"), 6),
        with_uuid(gpu(7, memory="16Gi"), 7),
    ]
    picky = observe.PackageSpec(
        "rtx-big",
        "nvidia-rtx-3080",
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('12Gi')) >= 0",),
        1,
        1,
        1,
    )
    observation = run(slices=[slice_("n1", devices)], packages=[picky])
    # Names, UUIDs and indexes differ, but the selectors read only productName and memory.
    assert observation.evaluated_devices == 3
    packages = {key[2]: d["packages"] for key, d in observation.devices.items()}
    assert packages == {**{f"gpu-{i}": [] for i in range(7)}, "gpu-7": ["rtx-big"]}
    classes = {key[2]: d["device_classes"] for key, d in observation.devices.items()}
    assert classes["gpu-6"] == []
    assert classes["gpu-0"] == classes["gpu-7"] == ["nvidia-rtx-3080"]


def test_a_selector_that_may_read_any_attribute_is_evaluated_for_every_device():
    walker = {
        "metadata": {"name": "has-uuid"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": "device.attributes['gpu.nvidia.com'].exists(k, k == 'uuid')"
                    }
                }
            ]
        },
    }
    devices = [with_uuid(gpu(i), i) for i in range(3)] + [gpu(3)]
    observation = run(slices=[slice_("n1", devices)], device_classes=[RTX_CLASS, walker])
    assert observation.evaluated_devices == 4
    classes = {key[2]: d["device_classes"] for key, d in observation.devices.items()}
    assert classes["gpu-0"] == ["has-uuid", "nvidia-rtx-3080"]
    assert classes["gpu-3"] == ["nvidia-rtx-3080"]


_PRODUCTS = ("NVIDIA GeForce RTX 3080", "NVIDIA L40S", "NVIDIA H100 80GB HBM3")
_PROPERTY_CLASSES = {
    "rtx": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA GeForce RTX 3080'",
    "big": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    "first": "device.attributes['gpu.nvidia.com'].index == 0",
    "tagged": "device.attributes['gpu.nvidia.com'].exists(k, k == 'tag')",
    "sized": "size(device.attributes['gpu.nvidia.com']) > 4",
}


@settings(max_examples=60, deadline=None)
@given(
    devices=st.lists(
        st.tuples(
            st.sampled_from(_PRODUCTS),
            st.sampled_from(["10Gi", "48Gi", "80Gi"]),
            st.integers(0, 2),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    ),
    chosen=st.sets(st.sampled_from(sorted(_PROPERTY_CLASSES)), min_size=1),
)
def test_shared_evaluations_give_what_each_device_would_get_alone(devices, chosen):
    built = []
    for n, (product, memory, index, tagged) in enumerate(devices):
        device = with_uuid(gpu(n, product=product, memory=memory), n)
        device["attributes"]["index"] = {"int": index}
        if tagged:
            device["attributes"]["tag"] = {"string": "x"}
        built.append(device)
    classes = [
        {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}
        for name, expression in _PROPERTY_CLASSES.items()
        if name in chosen
    ]
    observation = run(slices=[slice_("n1", built)], device_classes=classes)
    for device in built:
        alone = sorted(
            name
            for name in chosen
            if dracel.device_matches(
                [dracel.compile_selector(_PROPERTY_CLASSES[name])],
                dracel.device_env(DRIVER, device),
            )
        )
        assert observation.devices[(DRIVER, "n1", device["name"])]["device_classes"] == alone
