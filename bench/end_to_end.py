"""End to end: a burst of 500 units from POST /api/v1/gpu-units to phase Running on a
development cluster of 63 nodes x 8 H100 (the real API server, scheduler and
controller-manager; KWOK reports a bound pod Running), with gunicorn, 2 Celery worker
processes (prefork, concurrency 2), the observer, and Celery beat with its backstop reconcile
at the default 30 s, against the same ResourceClaim + Pod per unit created directly against
the same API server (no GPUUnit, no control plane) with the official kubernetes client from 2
threads. The direct burst runs first and its objects are deleted before the control plane's.
Prints one JSON line.

Time to running is measured from the moment a request is sent to the first poll (every 0.1 s)
that sees the unit Running in the database; for the baseline, to the watch event that shows
its pod Running."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import harness

UNITS = harness.sized(500, 12)
NODES = harness.sized(63, 2)  # 504 GPUs (small: 16)
WORKERS = 2
RECONCILE_INTERVAL_SECONDS = "30"
POLL_SECONDS = 0.1
TIMEOUT_SECONDS = 300.0
DIRECT_NAMESPACE = "bench-direct"


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


def wait_running(tenant: Any, units: int) -> dict[str, float]:
    """Until `units` of the tenant's units are Running in the database: when each was first
    seen so (a poll every POLL_SECONDS)."""
    from runtime.models import GPUUnit

    running: dict[str, float] = {}
    deadline = time.perf_counter() + TIMEOUT_SECONDS
    while len(running) < units:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"only {len(running)} of {units} units Running in time")
        now = time.perf_counter()
        for name in GPUUnit.objects.filter(tenant=tenant, phase="Running").values_list(
            "name", flat=True
        ):
            running.setdefault(name, now)
        time.sleep(POLL_SECONDS)
    return running


def worker_args() -> tuple[str, ...]:
    chosen = os.environ.get("BENCH_WORKER_ARGS", f"--pool prefork --concurrency {WORKERS}")
    return (*chosen.split(), "--without-heartbeat", "--without-gossip", "--without-mingle")


def control_plane(cluster: harness.DevCluster, tenant: Any, key: str, package: Any) -> dict:
    from runtime.control.provisioning import install_crd

    body = {"packageID": package.id, "image": harness.IMAGE}

    def create(index: int, worker: int) -> harness.Request:
        name = f"e2e-{index}"
        return harness.json_request(
            "POST", "/api/v1/gpu-units", {"operationID": name, "name": name, **body}, key
        )

    schedule = Path(tempfile.mkdtemp(prefix="bench-beat-")) / "schedule"
    install_crd()
    harness.tenant_namespace(cluster, tenant)
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
    result = load["result"]
    result.check(201)
    sent = {f"e2e-{index}": at for index, at in result.sent_at.items()}
    return {**burst_stats(sent, running), "post_rps": round(result.rps, 1)}


def direct(cluster: harness.DevCluster, package: Any) -> dict:
    """The same claims and pods, created straight against the cluster from WORKERS threads;
    deleted afterwards."""
    harness.direct_namespace(cluster, DIRECT_NAMESPACE)
    client = harness.DirectClient(cluster)
    queue = iter(
        [
            harness.direct_objects(package, f"e2e-{index}", DIRECT_NAMESPACE)
            for index in range(UNITS)
        ]
    )
    lock = threading.Lock()
    sent: dict[str, float] = {}

    def creator() -> None:
        while True:
            with lock:
                item = next(queue, None)
            if item is None:
                return
            claim, pod = item
            sent[pod["metadata"]["name"]] = time.perf_counter()
            client.create(DIRECT_NAMESPACE, claim, pod)

    running = harness.PodsRunning(cluster, DIRECT_NAMESPACE).start()
    threads = [threading.Thread(target=creator) for _ in range(WORKERS)]
    for thread in threads:
        thread.start()
    times = running.wait(UNITS, timeout=TIMEOUT_SECONDS)
    for thread in threads:
        thread.join()
    harness.clear_namespace(cluster, DIRECT_NAMESPACE)
    return burst_stats(sent, times)


def main() -> None:
    harness.setup(
        "end_to_end",
        RECONCILE_INTERVAL_SECONDS=RECONCILE_INTERVAL_SECONDS,
        INVENTORY_SYNC_INTERVAL_SECONDS="30",
        KUBE_REQUEST_TIMEOUT="10",
    )
    tenant, key = harness.make_tenant("bench-e2e")
    package = harness.make_package()
    with harness.dev_cluster("default", nodes=NODES) as cluster:
        harness.use_cluster(cluster.kubeconfig)
        harness.log("end_to_end: direct")
        baseline = direct(cluster, package)
        harness.log("end_to_end: control plane")
        measured = control_plane(cluster, tenant, key, package)
    figures = {
        "bench": "end_to_end",
        "units": UNITS,
        "cluster": f"a development cluster of {NODES} nodes x 8 H100",
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
