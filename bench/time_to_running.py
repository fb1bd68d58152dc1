"""Time to Running on an idle stack: units created one after another, each timed from its POST
to the first poll (every 20 ms) that sees it Running in the database, against the same claim
and pod created directly against the same API server with the official client and timed to
the first poll (every 20 ms) that reads the pod Running. The difference is the control plane's
own share of the wait. gunicorn, 2 Celery worker processes, the observer and beat (backstop
every 30 s), on a development cluster of 3 nodes x 8 H100 (the real API server, scheduler and
controller-manager; KWOK reports a bound pod Running). The direct units run first and are
deleted before the control plane's. Prints one JSON line."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench import harness

UNITS = harness.sized(24, 4)
NODES = 3
POLL_SECONDS = 0.02
TIMEOUT_SECONDS = 30.0
DIRECT_NAMESPACE = "bench-direct"


def _percentiles(times: list[float]) -> dict[str, float]:
    result = harness.LoadResult(latencies=sorted(times))
    return {
        "p50_s": round(result.percentile_ms(50) / 1000, 3),
        "p99_s": round(result.percentile_ms(99) / 1000, 3),
    }


def control_plane(cluster: harness.DevCluster, tenant: Any, key: str, package: Any) -> list[float]:
    from runtime.control.provisioning import install_crd
    from runtime.models import GPUUnit

    schedule = Path(tempfile.mkdtemp(prefix="bench-beat-")) / "schedule"
    times: list[float] = []
    install_crd()
    harness.tenant_namespace(cluster, tenant)
    with (
        harness.gunicorn() as port,
        harness.celery("worker", "--pool", "prefork", "--concurrency", "2"),
        harness.celery("beat", "--schedule", str(schedule)),
        harness.observer(),
    ):
        harness.wait_for_worker()
        body = {"packageID": package.id, "image": harness.IMAGE}
        for index in range(UNITS):
            name = f"ttr-{index}"
            request = harness.json_request(
                "POST", "/api/v1/gpu-units", {"operationID": name, "name": name, **body}, key
            )
            sent = time.perf_counter()
            harness.run_load(port, lambda _i, _w, r=request: r, concurrency=1, total=1).check(201)
            deadline = sent + TIMEOUT_SECONDS
            while not GPUUnit.objects.filter(name=name, phase="Running").exists():
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{name} was not Running within {TIMEOUT_SECONDS} s")
                time.sleep(POLL_SECONDS)
            times.append(time.perf_counter() - sent)
    return times


def direct(cluster: harness.DevCluster, package: Any) -> list[float]:
    """The same claims and pods, created straight against the cluster; deleted afterwards."""
    harness.direct_namespace(cluster, DIRECT_NAMESPACE)
    client = harness.DirectClient(cluster)
    times: list[float] = []
    for index in range(UNITS):
        claim, pod = harness.direct_objects(package, f"ttr-{index}", DIRECT_NAMESPACE)
        pod_name = pod["metadata"]["name"]
        sent = time.perf_counter()
        client.create(DIRECT_NAMESPACE, claim, pod)
        deadline = sent + TIMEOUT_SECONDS
        while client.pod_phase(DIRECT_NAMESPACE, pod_name) != "Running":
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{pod_name} was not Running within {TIMEOUT_SECONDS} s")
            time.sleep(POLL_SECONDS)
        times.append(time.perf_counter() - sent)
    harness.clear_namespace(cluster, DIRECT_NAMESPACE)
    return times


def main() -> None:
    harness.setup("time_to_running", KUBE_REQUEST_TIMEOUT="10")
    tenant, key = harness.make_tenant("bench-ttr")
    package = harness.make_package()
    with harness.dev_cluster("default", nodes=NODES) as cluster:
        harness.use_cluster(cluster.kubeconfig)
        harness.log("time_to_running: direct")
        baseline = direct(cluster, package)
        harness.log("time_to_running: control plane")
        measured = control_plane(cluster, tenant, key, package)
    ours, theirs = _percentiles(measured), _percentiles(baseline)
    overhead = sorted(a - b for a, b in zip(sorted(measured), sorted(baseline), strict=True))
    harness.emit(
        {
            "bench": "time_to_running",
            "units": UNITS,
            "cluster": f"a development cluster of {NODES} nodes x 8 H100",
            "poll_s": POLL_SECONDS,
            **{f"control_plane_{k}": v for k, v in ours.items()},
            **{f"direct_{k}": v for k, v in theirs.items()},
            "overhead_p50_s": round(ours["p50_s"] - theirs["p50_s"], 3),
            "overhead_p99_s": round(ours["p99_s"] - theirs["p99_s"], 3),
            "overhead_max_s": round(max(overhead), 3),
        }
    )


if __name__ == "__main__":
    main()
