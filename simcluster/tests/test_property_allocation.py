"""Property: over random topologies and random create/delete sequences run through the
scheduler, no device is ever held by two claims, every allocated claim has exactly what it asked
for, and all of a pod's devices sit on the pod's node."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcluster.scheduler import Scheduler
from simcluster.store import Store
from simcluster.topology import build_objects

PRODUCTS = {"A": "80Gi", "B": "10Gi"}
CLASSES = {
    "any": "device.driver == 'gpu.nvidia.com'",
    "a": "device.attributes['gpu.nvidia.com'].productName == 'A'",
    "b": "device.attributes['gpu.nvidia.com'].productName == 'B'",
    "big": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
}
MATCHES = {"any": {"A", "B"}, "a": {"A"}, "b": {"B"}, "big": {"A"}}

nodes_strategy = st.lists(
    st.tuples(st.sampled_from(sorted(PRODUCTS)), st.integers(min_value=0, max_value=4)),
    min_size=1,
    max_size=4,
)
create = st.tuples(
    st.just("create"),
    st.sampled_from(sorted(CLASSES)),
    st.sampled_from(["ExactCount", "ExactCount", "All"]),
    st.integers(min_value=1, max_value=3),
)
delete = st.tuples(st.just("delete"), st.integers(min_value=0, max_value=20))
operations_strategy = st.lists(st.one_of(create, create, delete), min_size=1, max_size=12)


def _store(nodes: list[tuple[str, int]]) -> Store:
    store = Store()
    store.create(
        "namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "p"}},
        internal=True,
    )
    topology = {
        "nodes": [
            {
                "name": f"node-{i}",
                "cpu": "8",
                "memory": "32Gi",
                "gpus": [{"product": product, "count": count, "memory": PRODUCTS[product]}],
            }
            for i, (product, count) in enumerate(nodes)
        ],
        "deviceClasses": [
            {"name": name, "selector": expression} for name, expression in CLASSES.items()
        ],
    }
    for resource, obj in build_objects(topology):
        store.create(resource, obj, internal=True)
    return store


def _create(store: Store, index: int, device_class: str, mode: str, count: int) -> None:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    store.create(
        "resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"claim-{index}", "namespace": "p"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        },
    )
    store.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{index}", "namespace": "p"},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimName": f"claim-{index}"}],
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
                ],
            },
        },
    )


def _check_invariants(store: Store, nodes: list[tuple[str, int]]) -> None:
    products = {f"node-{i}": product for i, (product, _) in enumerate(nodes)}
    sizes = {f"node-{i}": count for i, (_, count) in enumerate(nodes)}
    pods = {p["metadata"]["name"]: p for p in store.list("pods", "p")}
    seen: dict[tuple[str, str, str], str] = {}
    for claim in store.list("resourceclaims", "p"):
        name = claim["metadata"]["name"]
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation is None:
            continue
        results = allocation["devices"]["results"]
        for result in results:
            key = (result["driver"], result["pool"], result["device"])
            assert key not in seen, f"{key} allocated to {seen[key]} and {name}"
            seen[key] = name
        [node] = {r["pool"] for r in results}
        exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
        device_class = exactly["deviceClassName"]
        assert products[node] in MATCHES[device_class]
        if exactly["allocationMode"] == "All":
            assert len(results) == sizes[node]
        else:
            assert len(results) == exactly["count"]
        assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
            node
        ]
        [consumer] = claim["status"]["reservedFor"]
        pod = pods[consumer["name"]]
        assert pod["metadata"]["uid"] == consumer["uid"]
        assert pod["spec"]["nodeName"] == node
        assert pod["status"]["phase"] == "Running"
    for pod in pods.values():
        if pod["spec"].get("nodeName"):
            claim = store.get(
                "resourceclaims", "p", pod["spec"]["resourceClaims"][0]["resourceClaimName"]
            )
            assert claim["status"]["allocation"], "a running pod's claim is allocated"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=nodes_strategy, operations=operations_strategy)
def test_allocations_stay_exclusive_and_exact_over_random_operations(
    nodes: list[tuple[str, int]], operations: list[tuple]
) -> None:
    store = _store(nodes)
    scheduler = Scheduler(store)
    live: list[int] = []
    for number, operation in enumerate(operations):
        if operation[0] == "create":
            _, device_class, mode, count = operation
            _create(store, number, device_class, mode, count)
            live.append(number)
        elif live:
            victim = live.pop(operation[1] % len(live))
            store.delete("pods", "p", f"pod-{victim}")
        scheduler.run_once()
        _check_invariants(store, nodes)


# -- shares, partitions, constraints and taints -------------------------------------------------

DRIVER = "gpu.example.com"
PARENT = f"{DRIVER}/parent"
# Two parents; each has two whole GPUs, one shareable GPU (8Gi) and four partitions drawing
# from the parent's 8Gi counter set (4Gi, 4Gi, 2Gi, 2Gi).
PARTITIONS = ("4Gi", "4Gi", "2Gi", "2Gi")
KINDS = ("whole", "shared", "part")
KIND_CLASSES = {kind: f"device.attributes['{DRIVER}'].kind == '{kind}'" for kind in KINDS}
TAINT = {"key": "example.com/maintenance", "value": "on", "effect": "NoSchedule"}
TOLERATION = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
GIB = 2**30


def _device(name: str, kind: str, parent: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"kind": {"string": kind}, "parent": {"string": f"p{parent}"}},
        **extra,
    }


def _mixed_devices() -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = []
    for parent in (0, 1):
        devices += [_device(f"whole-{parent}-{i}", "whole", parent) for i in (0, 1)]
        devices.append(
            _device(
                f"shared-{parent}",
                "shared",
                parent,
                allowMultipleAllocations=True,
                capacity={"memory": {"value": "8Gi"}},
            )
        )
        devices += [
            _device(
                f"part-{parent}-{i}",
                "part",
                parent,
                capacity={"memory": {"value": memory}},
                consumesCounters=[
                    {"counterSet": f"set-{parent}", "counters": {"memory": {"value": memory}}}
                ],
            )
            for i, memory in enumerate(PARTITIONS)
        ]
    return devices


def _mixed_store() -> Store:
    store = _store([("A", 0)])
    for name, expression in KIND_CLASSES.items():
        store.create(
            "deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            },
            internal=True,
        )
    for name, spec in (
        (
            "counters",
            {
                "sharedCounters": [
                    {"name": f"set-{p}", "counters": {"memory": {"value": "8Gi"}}} for p in (0, 1)
                ]
            },
        ),
        ("devices", {"devices": _mixed_devices()}),
    ):
        store.create(
            "resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"node-0-{name}"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": "node-0",
                    "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 2},
                    **spec,
                },
            },
            internal=True,
        )
    return store


mixed_create = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(KINDS),
        "count": st.integers(min_value=1, max_value=3),
        "share": st.sampled_from(["1Gi", "2Gi", "3Gi", "5Gi"]),
        "parent": st.sampled_from([None, "p0", "p1"]),
        "same_parent": st.booleans(),
        "tolerates": st.booleans(),
    }
)
mixed_operation = st.one_of(
    st.tuples(st.just("create"), mixed_create),
    st.tuples(st.just("create"), mixed_create),
    st.tuples(st.just("delete"), st.integers(min_value=0, max_value=20)),
    st.tuples(st.just("taint"), st.sampled_from([d["name"] for d in _mixed_devices()])),
)


def _mixed_claim(store: Store, index: int, shape: dict[str, Any]) -> None:
    exactly: dict[str, Any] = {"deviceClassName": shape["kind"], "count": shape["count"]}
    if shape["kind"] == "shared":
        exactly["count"] = 1
        exactly["capacity"] = {"requests": {"memory": shape["share"]}}
    if shape["parent"]:
        expression = f"device.attributes['{DRIVER}'].parent == '{shape['parent']}'"
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    if shape["tolerates"]:
        exactly["tolerations"] = [TOLERATION]
    devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if shape["same_parent"]:
        devices["constraints"] = [{"requests": ["gpu"], "matchAttribute": PARENT}]
    store.create(
        "resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"claim-{index}", "namespace": "p"},
            "spec": {"devices": devices},
        },
    )
    store.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{index}", "namespace": "p"},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimName": f"claim-{index}"}],
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}
                ],
            },
        },
    )


def _taint(store: Store, device_name: str) -> None:
    resource_slice = store.get("resourceslices", None, "node-0-devices")
    for device in resource_slice["spec"]["devices"]:
        if device["name"] == device_name:
            device["taints"] = [TAINT]
    store.update("resourceslices", resource_slice, internal=True)


def _check_mixed(store: Store, tainted: set[str], seen_allocated: set[str]) -> None:
    devices = {d["name"]: d for d in _mixed_devices()}
    whole: dict[str, str] = {}
    shared: dict[str, int] = {}
    drawn: dict[str, int] = {"set-0": 0, "set-1": 0}
    drawing: set[str] = set()
    for claim in store.list("resourceclaims", "p"):
        name = claim["metadata"]["name"]
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation is None:
            continue
        exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
        results = allocation["devices"]["results"]
        assert len(results) == exactly["count"], name
        for result in results:
            device = devices[result["device"]]
            attributes = device["attributes"]
            # The class's and the request's selectors.
            assert attributes["kind"]["string"] == exactly["deviceClassName"], name
            for selector in exactly.get("selectors") or []:
                wanted = selector["cel"]["expression"].rsplit("'", 2)[1]
                assert attributes["parent"]["string"] == wanted, name
            if result.get("shareID"):
                assert device.get("allowMultipleAllocations"), name
                assert result["consumedCapacity"] == exactly["capacity"]["requests"]
                shared[device["name"]] = shared.get(device["name"], 0) + int(
                    exactly["capacity"]["requests"]["memory"][:-2]
                )
            else:
                assert device["name"] not in whole, f"{device['name']}: {whole.get(device['name'])}"
                whole[device["name"]] = name
            if device.get("consumesCounters") and device["name"] not in drawing:
                drawing.add(device["name"])
                for draw in device["consumesCounters"]:
                    drawn[draw["counterSet"]] += int(draw["counters"]["memory"]["value"][:-2])
            # NoSchedule: a device tainted before the claim was allocated needs a toleration.
            if name not in seen_allocated and device["name"] in tainted:
                assert exactly.get("tolerations"), f"{name} got tainted {device['name']}"
        if claim["spec"]["devices"].get("constraints"):
            assert (
                len({devices[r["device"]]["attributes"]["parent"]["string"] for r in results}) == 1
            )
        seen_allocated.add(name)
    assert not set(whole) & set(shared), "a device held whole and shared"
    assert all(used <= 8 for used in shared.values()), shared
    assert all(used <= 8 for used in drawn.values()), drawn


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(mixed_operation, min_size=1, max_size=14))
def test_shares_counters_constraints_and_taints_hold_over_random_operations(
    operations: list[tuple],
) -> None:
    store = _mixed_store()
    scheduler = Scheduler(store)
    live: list[int] = []
    tainted: set[str] = set()
    seen_allocated: set[str] = set()
    for number, (verb, argument) in enumerate(operations):
        if verb == "create":
            _mixed_claim(store, number, argument)
            live.append(number)
        elif verb == "taint":
            _taint(store, argument)
            tainted.add(argument)
        elif live:
            victim = live.pop(argument % len(live))
            store.delete("pods", "p", f"pod-{victim}")
            seen_allocated.discard(f"claim-{victim}")
        scheduler.run_once()
        _check_mixed(store, tainted, seen_allocated)
