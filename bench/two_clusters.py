"""The 500-unit burst over two clusters (ARCHITECTURE §20): two development clusters of 32
nodes x 8 H100 each (the process's own, `default`, and `bench-b` in another region; each the
real API server, scheduler and controller-manager with KWOK nodes), the orders naming no
region, with gunicorn, 2 Celery worker processes (prefork, concurrency 2; they take both
clusters' queues), one observer watching both and Celery beat, against the same claims and
pods created directly against the same two API servers (half each) with the official
kubernetes client, one thread per cluster. The direct burst runs first and its objects are
deleted before the control plane's. Prints one JSON line, with how many units each cluster
got.

Time to running as in bench.end_to_end: from the request sent to the first poll (every 0.1 s)
that sees the unit Running in the database (for the baseline, to the watch event that shows
its pod Running in its cluster)."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import harness
from bench.end_to_end import (
    DIRECT_NAMESPACE,
    RECONCILE_INTERVAL_SECONDS,
    TIMEOUT_SECONDS,
    WORKERS,
    burst_stats,
    wait_running,
    worker_args,
)

UNITS = harness.sized(500, 12)
NODES = harness.sized(32, 1)  # per cluster: 512 GPUs in all (small: 16)
OWN = "default"
OTHER = "bench-b"


def control_plane(
    own: harness.DevCluster, other: harness.DevCluster, tenant: Any, key: str, package: Any
) -> dict:
    from django.conf import settings

    from controlplane import kube
    from inventory.models import Cluster
    from inventory.sync import sync_inventory
    from runtime.control.provisioning import install_crd
    from runtime.models import GPUUnit

    body = {"packageID": package.id, "image": harness.IMAGE}

    def create(index: int, worker: int) -> harness.Request:
        name = f"two-{index}"
        return harness.json_request(
            "POST", "/api/v1/gpu-units", {"operationID": name, "name": name, **body}, key
        )

    schedule = Path(tempfile.mkdtemp(prefix="bench-beat-")) / "schedule"
    install_crd()
    harness.tenant_namespace(own, tenant)
    # Registered before the workers start: a worker of the default queue takes it too.
    # Its kubeconfig is a file of CLUSTER_CREDENTIALS_DIR, here and in the processes started.
    os.environ["CLUSTER_CREDENTIALS_DIR"] = str(other.kubeconfig.parent)
    settings.CLUSTER_CREDENTIALS_DIR = str(other.kubeconfig.parent)
    Cluster.objects.update_or_create(
        name=OTHER, defaults={"region": "region-b", "kubeconfig": other.kubeconfig.name}
    )
    with kube.using(OTHER):
        install_crd()
    harness.tenant_namespace(other, tenant, cluster_name=OTHER)
    for cluster in (OWN, OTHER):  # what fits where, before the first order
        sync_inventory(cluster)
    with (
        harness.gunicorn() as port,
        harness.celery("worker", *worker_args()),
        harness.celery("beat", "--schedule", str(schedule)),
        harness.observer(),
    ):
        harness.wait_for_worker()
        load: dict[str, harness.LoadResult] = {}
        thread = threading.Thread(
            target=lambda: load.update(result=harness.run_load(port, create, total=UNITS))
        )
        thread.start()
        running = wait_running(tenant, UNITS)
        thread.join()
        spread = {
            cluster: GPUUnit.objects.filter(tenant=tenant, cluster=cluster).count()
            for cluster in (OWN, OTHER)
        }
    result = load["result"]
    result.check(201)
    sent = {f"two-{index}": at for index, at in result.sent_at.items()}
    return {
        **burst_stats(sent, running),
        "post_rps": round(result.rps, 1),
        "units_own_cluster": spread[OWN],
        "units_other_cluster": spread[OTHER],
    }


def direct(clusters: tuple[harness.DevCluster, harness.DevCluster], package: Any) -> dict:
    """The same claims and pods, created straight against both clusters, half each, one
    thread per cluster; deleted afterwards."""
    for cluster in clusters:
        harness.direct_namespace(cluster, DIRECT_NAMESPACE)
    clients = [harness.DirectClient(cluster) for cluster in clusters]
    sent: dict[str, float] = {}

    def creator(which: int) -> None:
        for index in range(which, UNITS, 2):
            claim, pod = harness.direct_objects(package, f"two-{index}", DIRECT_NAMESPACE)
            sent[f"{which}/{pod['metadata']['name']}"] = time.perf_counter()
            clients[which].create(DIRECT_NAMESPACE, claim, pod)

    watches = [harness.PodsRunning(cluster, DIRECT_NAMESPACE).start() for cluster in clusters]
    threads = [threading.Thread(target=creator, args=(which,)) for which in (0, 1)]
    for thread in threads:
        thread.start()
    running = {
        f"{which}/{name}": at
        for which, watch in enumerate(watches)
        for name, at in watch.wait(len(range(which, UNITS, 2)), timeout=TIMEOUT_SECONDS).items()
    }
    for thread in threads:
        thread.join()
    for cluster in clusters:
        harness.clear_namespace(cluster, DIRECT_NAMESPACE)
    return burst_stats(sent, running)


def main() -> None:
    harness.setup(
        "two_clusters",
        RECONCILE_INTERVAL_SECONDS=RECONCILE_INTERVAL_SECONDS,
        INVENTORY_SYNC_INTERVAL_SECONDS="30",
        KUBE_REQUEST_TIMEOUT="10",
    )
    tenant, key = harness.make_tenant("bench-two")
    package = harness.make_package()
    with (
        harness.dev_cluster(OWN, nodes=NODES) as own,
        harness.dev_cluster(OTHER, nodes=NODES) as other,
    ):
        harness.use_cluster(own.kubeconfig)
        harness.log("two_clusters: direct")
        baseline = direct((own, other), package)
        harness.log("two_clusters: control plane")
        measured = control_plane(own, other, tenant, key, package)
    harness.emit(
        {
            "bench": "two_clusters",
            "units": UNITS,
            "clusters": f"2 development clusters of {NODES} nodes x 8 H100",
            "workers": f"{WORKERS} celery worker processes (prefork), both clusters' queues",
            "post_concurrency": harness.CONCURRENCY,
            "direct_threads": 2,
            **{f"control_plane_{k}": v for k, v in measured.items()},
            **{f"direct_{k}": v for k, v in baseline.items()},
            "units_per_s_ratio": harness.ratio(measured["units_per_s"], baseline["units_per_s"]),
            "p50_ratio": harness.ratio(measured["p50_s"], baseline["p50_s"]),
        }
    )


if __name__ == "__main__":
    main()
