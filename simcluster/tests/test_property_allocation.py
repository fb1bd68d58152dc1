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
