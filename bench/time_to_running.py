"""Time to Running on an idle stack: units created one after another, each timed from its POST
to the first poll (every 20 ms) that sees it Running in the database, against the same claim
and pod created directly with the official client and timed to the pod Running in the
cluster. The difference is the control plane's own share of the wait. gunicorn, 2 Celery
worker processes, the observer and beat (backstop every 30 s), on a simulated cluster of
3 nodes x 8 H100. Prints one JSON line."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench import harness

UNITS = 24
POLL_SECONDS = 0.02
TIMEOUT_SECONDS = 30.0
SIM_ARGS = ("--nodes", "3", "--gpus-per-node", "8", "--scheduler")


def _percentiles(times: list[float]) -> dict[str, float]:
    result = harness.LoadResult(latencies=sorted(times))
    return {
        "p50_s": round(result.percentile_ms(50) / 1000, 3),
        "p99_s": round(result.percentile_ms(99) / 1000, 3),
    }


def control_plane(key: str, package) -> list[float]:
    from runtime.control.provisioning import install_crd
    from runtime.models import GPUUnit

    schedule = Path(tempfile.mkdtemp(prefix="bench-beat-")) / "schedule"
    times: list[float] = []
    with (
        harness.simcluster(*SIM_ARGS, module="bench.simserver") as kubeconfig,
        harness.gunicorn() as port,
    ):
        harness.use_cluster(kubeconfig)
        install_crd()
        with (
            harness.celery("worker", "--pool", "prefork", "--concurrency", "2"),
            harness.celery("beat", "--schedule", str(schedule)),
            harness.observer(),
        ):
            harness.wait_for_worker()
            body = {"packageID": package.id, "image": "ghcr.io/example/worker:1.0"}
            for index in range(UNITS):
                name = f"ttr-{index}"
                request = harness.json_request(
                    "POST", "/api/v1/gpu-units", {"operationID": name, "name": name, **body}, key
                )
                sent = time.perf_counter()
                harness.run_load(port, lambda _i, _w, r=request: r, concurrency=1, total=1).check(
                    201
                )
                deadline = sent + TIMEOUT_SECONDS
                while not GPUUnit.objects.filter(name=name, phase="Running").exists():
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"{name} was not Running within {TIMEOUT_SECONDS} s")
                    time.sleep(POLL_SECONDS)
                times.append(time.perf_counter() - sent)
    return times


def direct(package) -> list[float]:
    """The same claim and pod, created straight against the simulated cluster."""
    from kubernetes import client, config

    from runtime import manifests

    namespace = "bench-direct"
    times: list[float] = []
    with harness.simcluster(*SIM_ARGS, module="bench.simserver") as kubeconfig:
        api = config.new_client_from_config(str(kubeconfig))
        core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
        core.create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        for index in range(UNITS):
            name = f"ttr-{index}"
            claim, pod = harness.direct_objects(package, name, namespace)
            sent = time.perf_counter()
            resource.create_namespaced_resource_claim(namespace, claim, _preload_content=False)
            core.create_namespaced_pod(namespace, pod, _preload_content=False)
            deadline = sent + TIMEOUT_SECONDS
            pod_name = manifests.pod_name_for(name)
            while core.read_namespaced_pod(pod_name, namespace).status.phase != "Running":
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{pod_name} was not Running within {TIMEOUT_SECONDS} s")
                time.sleep(POLL_SECONDS)
            times.append(time.perf_counter() - sent)
    return times


def main() -> None:
    harness.setup("time_to_running", KUBE_REQUEST_TIMEOUT="10")
    _tenant, key = harness.make_tenant("bench-ttr")
    package = harness.make_package()
    harness.log("time_to_running: control plane")
    measured = control_plane(key, package)
    harness.log("time_to_running: direct")
    baseline = direct(package)
    ours, theirs = _percentiles(measured), _percentiles(baseline)
    overhead = sorted(a - b for a, b in zip(sorted(measured), sorted(baseline), strict=True))
    harness.emit(
        {
            "bench": "time_to_running",
            "units": UNITS,
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
