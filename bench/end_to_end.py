"""End to end: 500 units from POST /api/v1/gpu-units to phase Running in the simulated cluster
(63 nodes x 8 H100), with gunicorn, 2 Celery worker processes (prefork, concurrency 2), the
observer, and Celery beat with its backstop reconcile at the default 30 s, against the
simulated cluster's own throughput for the same objects created directly (ResourceClaim + Pod,
no GPUUnit, no control plane) with the official kubernetes client from 2 threads. Prints one
JSON line.

Time to running is measured from the moment a request is sent to the first poll (every 0.1 s)
that sees the unit Running in the database (the pod Running in the cluster, for the baseline)."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path

from bench import harness

UNITS = 500
NODES = 63  # 504 GPUs
WORKERS = 2
RECONCILE_INTERVAL_SECONDS = "30"
POLL_SECONDS = 0.1
TIMEOUT_SECONDS = 300.0
SIM_ARGS = ("--nodes", str(NODES), "--gpus-per-node", "8", "--scheduler")


def burst_stats(sent: dict[str, float], running: dict[str, float]) -> dict:
    times = sorted(running[name] - sent[name] for name in running)
    span = max(running.values()) - min(sent.values())
    result = harness.LoadResult(latencies=times)
    return {
        "units_per_s": round(len(running) / span, 2),
        "p50_s": round(result.percentile_ms(50) / 1000, 3),
        "p99_s": round(result.percentile_ms(99) / 1000, 3),
        "span_s": round(span, 2),
    }


def control_plane(tenant, key: str, package) -> dict:
    from runtime.control.provisioning import install_crd
    from runtime.models import GPUUnit

    body = {"packageID": package.id, "image": "ghcr.io/example/worker:1.0"}

    def create(index: int, worker: int) -> harness.Request:
        name = f"e2e-{index}"
        return harness.json_request(
            "POST", "/api/v1/gpu-units", {"operationID": name, "name": name, **body}, key
        )

    schedule = Path(tempfile.mkdtemp(prefix="bench-beat-")) / "schedule"
    with (
        harness.simcluster(*SIM_ARGS, module="bench.simserver") as kubeconfig,
        harness.gunicorn() as port,
    ):
        harness.use_cluster(kubeconfig)
        install_crd()
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
    result = load["result"]
    result.check(201)
    sent = {f"e2e-{index}": at for index, at in result.sent_at.items()}
    return {**burst_stats(sent, running), "post_rps": round(result.rps, 1)}


def direct(package) -> dict:
    """The same claim and pod, created straight against the simulated cluster."""
    from kubernetes import client, config

    from runtime import manifests

    namespace = "bench-direct"
    with harness.simcluster(*SIM_ARGS, module="bench.simserver") as kubeconfig:
        api = config.new_client_from_config(str(kubeconfig))
        core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
        core.create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        objects = []
        for index in range(UNITS):
            name = f"e2e-{index}"
            objects.append((name, *harness.direct_objects(package, name, namespace)))
        sent: dict[str, float] = {}
        queue = iter(objects)
        lock = threading.Lock()

        def creator() -> None:
            while True:
                with lock:
                    item = next(queue, None)
                if item is None:
                    return
                name, claim, pod = item
                sent[manifests.pod_name_for(name)] = time.perf_counter()
                resource.create_namespaced_resource_claim(namespace, claim, _preload_content=False)
                core.create_namespaced_pod(namespace, pod, _preload_content=False)

        threads = [threading.Thread(target=creator) for _ in range(WORKERS)]
        for thread in threads:
            thread.start()
        running: dict[str, float] = {}
        deadline = time.perf_counter() + TIMEOUT_SECONDS
        while len(running) < UNITS:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"only {len(running)} of {UNITS} pods Running in time")
            now = time.perf_counter()
            pods = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)
            for pod in pods["items"]:
                if (pod.get("status") or {}).get("phase") == "Running":
                    running.setdefault(pod["metadata"]["name"], now)
            time.sleep(POLL_SECONDS)
        for thread in threads:
            thread.join()
    return burst_stats(sent, running)


def main() -> None:
    harness.setup(
        "end_to_end",
        RECONCILE_INTERVAL_SECONDS=RECONCILE_INTERVAL_SECONDS,
        INVENTORY_SYNC_INTERVAL_SECONDS="30",
        KUBE_REQUEST_TIMEOUT="10",
    )
    tenant, key = harness.make_tenant("bench-e2e")
    package = harness.make_package()
    harness.log("end_to_end: control plane")
    measured = control_plane(tenant, key, package)
    harness.log("end_to_end: direct")
    baseline = direct(package)
    figures = {
        "bench": "end_to_end",
        "units": UNITS,
        "workers": f"{WORKERS} celery worker processes (prefork)",
        "reconcile": f"the observer; beat's backstop reconcile_units every "
        f"{RECONCILE_INTERVAL_SECONDS} s",
        "post_concurrency": harness.CONCURRENCY,
        "direct_threads": WORKERS,
        **{f"control_plane_{k}": v for k, v in measured.items()},
        **{f"direct_{k}": v for k, v in baseline.items()},
        "units_per_s_ratio": harness.ratio(measured["units_per_s"], baseline["units_per_s"]),
        "p50_ratio": harness.ratio(measured["p50_s"], baseline["p50_s"]),
    }
    harness.emit(figures)


if __name__ == "__main__":
    main()
