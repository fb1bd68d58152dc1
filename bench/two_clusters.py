"""The 500-unit burst over two clusters (ARCHITECTURE §20): two simulated clusters of 32 nodes x
8 H100 each (the process's own, `default`, and `bench-b` in another region), the orders naming
no region, with gunicorn, 2 Celery worker processes (prefork, concurrency 2; they take both
clusters' queues), one observer watching both and Celery beat, against the same claims and
pods created directly on both clusters (half each) with the official kubernetes client from 2
threads. Prints one JSON line, with how many units each cluster got.

Time to running as in bench.end_to_end: from the request sent to the first poll (every 0.1 s)
that sees the unit Running in the database (the pod Running in its cluster, for the
baseline)."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path

from bench import harness
from bench.end_to_end import (
    POLL_SECONDS,
    RECONCILE_INTERVAL_SECONDS,
    TIMEOUT_SECONDS,
    WORKERS,
    burst_stats,
)

UNITS = 500
NODES = 32  # per cluster: 512 GPUs in all
SIM_ARGS = ("--nodes", str(NODES), "--gpus-per-node", "8", "--scheduler")
OTHER = "bench-b"


def control_plane(tenant, key: str, package) -> dict:
    from controlplane import kube
    from inventory.models import Cluster
    from inventory.sync import sync_inventory
    from runtime.control.provisioning import install_crd
    from runtime.models import GPUUnit

    body = {"packageID": package.id, "image": "ghcr.io/example/worker:1.0"}

    def create(index: int, worker: int) -> harness.Request:
        name = f"two-{index}"
        return harness.json_request(
            "POST", "/api/v1/gpu-units", {"operationID": name, "name": name, **body}, key
        )

    schedule = Path(tempfile.mkdtemp(prefix="bench-beat-")) / "schedule"
    with (
        harness.simcluster(*SIM_ARGS, module="bench.simserver") as own,
        harness.simcluster(*SIM_ARGS, module="bench.simserver") as other,
        harness.gunicorn() as port,
    ):
        harness.use_cluster(own)
        install_crd()
        # Registered before the workers start: a worker of the default queue takes it too.
        Cluster.objects.update_or_create(
            name=OTHER, defaults={"region": "region-b", "kubeconfig": str(other)}
        )
        with kube.using(OTHER):
            install_crd()
        for cluster in ("default", OTHER):  # what fits where, before the first order
            sync_inventory(cluster)
        worker_args = tuple(
            os.environ.get("BENCH_WORKER_ARGS", f"--pool prefork --concurrency {WORKERS}").split()
        )
        quiet = ("--without-heartbeat", "--without-gossip", "--without-mingle")
        with (
            harness.celery("worker", *worker_args, *quiet),
            harness.celery("beat", "--schedule", str(schedule)),
            harness.observer(),
        ):
            harness.wait_for_worker()
            load: dict[str, harness.LoadResult] = {}
            thread = threading.Thread(
                target=lambda: load.update(result=harness.run_load(port, create, total=UNITS))
            )
            thread.start()
            running: dict[str, float] = {}
            deadline = time.perf_counter() + TIMEOUT_SECONDS
            while len(running) < UNITS:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"only {len(running)} of {UNITS} units Running in time")
                now = time.perf_counter()
                for name in GPUUnit.objects.filter(tenant=tenant, phase="Running").values_list(
                    "name", flat=True
                ):
                    running.setdefault(name, now)
                time.sleep(POLL_SECONDS)
            thread.join()
            spread = {
                cluster: GPUUnit.objects.filter(tenant=tenant, cluster=cluster).count()
                for cluster in ("default", OTHER)
            }
    result = load["result"]
    result.check(201)
    sent = {f"two-{index}": at for index, at in result.sent_at.items()}
    return {
        **burst_stats(sent, running),
        "post_rps": round(result.rps, 1),
        "units_own_cluster": spread["default"],
        "units_other_cluster": spread[OTHER],
    }


def direct(package) -> dict:
    """The same claims and pods, created straight against both clusters, half each, one
    thread per cluster."""
    from kubernetes import client, config

    from runtime import manifests

    namespace = "bench-direct"
    with (
        harness.simcluster(*SIM_ARGS, module="bench.simserver") as first,
        harness.simcluster(*SIM_ARGS, module="bench.simserver") as second,
    ):
        apis = []
        for kubeconfig in (first, second):
            api = config.new_client_from_config(str(kubeconfig))
            core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
            core.create_namespace(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
            apis.append((core, resource))
        sent: dict[tuple[int, str], float] = {}

        def creator(which: int) -> None:
            core, resource = apis[which]
            for index in range(which, UNITS, 2):
                name = f"two-{index}"
                claim, pod = harness.direct_objects(package, name, namespace)
                sent[(which, manifests.pod_name_for(name))] = time.perf_counter()
                resource.create_namespaced_resource_claim(namespace, claim, _preload_content=False)
                core.create_namespaced_pod(namespace, pod, _preload_content=False)

        threads = [threading.Thread(target=creator, args=(which,)) for which in (0, 1)]
        for thread in threads:
            thread.start()
        running: dict[tuple[int, str], float] = {}
        deadline = time.perf_counter() + TIMEOUT_SECONDS
        while len(running) < UNITS:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"only {len(running)} of {UNITS} pods Running in time")
            now = time.perf_counter()
            for which, (core, _resource) in enumerate(apis):
                pods = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)
                for pod in pods["items"]:
                    if (pod.get("status") or {}).get("phase") == "Running":
                        running.setdefault((which, pod["metadata"]["name"]), now)
            time.sleep(POLL_SECONDS)
        for thread in threads:
            thread.join()
    return burst_stats(
        {f"{which}/{name}": at for (which, name), at in sent.items()},
        {f"{which}/{name}": at for (which, name), at in running.items()},
    )


def main() -> None:
    harness.setup(
        "two_clusters",
        RECONCILE_INTERVAL_SECONDS=RECONCILE_INTERVAL_SECONDS,
        INVENTORY_SYNC_INTERVAL_SECONDS="30",
        KUBE_REQUEST_TIMEOUT="10",
    )
    tenant, key = harness.make_tenant("bench-two")
    package = harness.make_package()
    harness.log("two_clusters: control plane")
    measured = control_plane(tenant, key, package)
    harness.log("two_clusters: direct")
    baseline = direct(package)
    harness.emit(
        {
            "bench": "two_clusters",
            "units": UNITS,
            "clusters": f"2 simulated clusters of {NODES} nodes x 8 H100",
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
