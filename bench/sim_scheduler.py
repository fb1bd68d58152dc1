"""Times one simulated-scheduler pass that places every pending pod: 10 nodes against 1,000 nodes
x 8 GPUs with 5,000 claims. Prints one JSON line; the ratio shows how a pass scales with size."""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simcluster.scheduler import Scheduler
from simcluster.store import Store
from simcluster.topology import load_topology

GPUS_PER_NODE = 8
# Devices per claim, cycled: 5,000 claims ask for 6,000 of the 8,000 GPUs at full size.
CLAIM_SIZES = (1, 1, 1, 2, 1)
NAMESPACE = "bench"


def add_claims(store: Store, claims: int, sizes: tuple[int, ...] = CLAIM_SIZES) -> None:
    """`claims` pending pods in namespace `bench`, each with its own H100 claim; the claims ask
    for `sizes` devices, cycled."""
    if store.get("namespaces", None, NAMESPACE) is None:
        store.create("namespaces", {"metadata": {"name": NAMESPACE}}, internal=True)
    for index in range(claims):
        name = f"job-{index}"
        store.create(
            "resourceclaims",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": "nvidia-h100",
                                    "count": sizes[index % len(sizes)],
                                },
                            }
                        ]
                    }
                },
            },
            internal=True,
        )
        store.create(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                    "containers": [
                        {
                            "name": "worker",
                            "image": "busybox:1.36",
                            "resources": {
                                "requests": {"cpu": "4", "memory": "16Gi"},
                                "claims": [{"name": "gpu", "request": "gpu"}],
                            },
                        }
                    ],
                },
            },
            internal=True,
        )


def build_store(nodes: int, claims: int) -> Store:
    store = Store()
    topology = {"generate": {"nodes": nodes, "gpus_per_node": GPUS_PER_NODE}}
    for resource, obj in load_topology(topology):
        store.create(resource, obj, internal=True)
    add_claims(store, claims)
    return store


def time_pass(nodes: int, claims: int, repetitions: int) -> float:
    """Median seconds of a first pass over a fresh store; every pod must end up bound."""
    timings = []
    for _ in range(repetitions):
        store = build_store(nodes, claims)
        scheduler = Scheduler(store)
        started = time.perf_counter()
        report = scheduler.run_once()
        timings.append(time.perf_counter() - started)
        if report.bound != claims:
            raise SystemExit(f"expected {claims} pods bound, got {report}")
    return statistics.median(timings)


def main() -> None:
    small = time_pass(10, 50, repetitions=5)
    large = time_pass(1000, 5000, repetitions=3)
    print(
        json.dumps(
            {
                "bench": "sim_scheduler",
                "nodes_10_s": round(small, 4),
                "nodes_1000_s": round(large, 4),
                "ratio": round(large / small, 1),
                "claims": 5000,
            }
        )
    )


if __name__ == "__main__":
    main()
