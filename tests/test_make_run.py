"""`make run` end to end: embedded services, sample data, web/worker/observer/beat; Ctrl-C
stops all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import kubernetes
import psutil
import pytest
import yaml

from devstack.services import free_port_block

ROOT = Path(__file__).resolve().parent.parent

SAMPLE_PACKAGES = yaml.safe_load((ROOT / "catalog" / "samples" / "packages.yaml").read_text())[
    "packages"
]


def get(url: str, key: str = "") -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=5
        ) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_until_up(base: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if get(f"{base}/api/v1/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail("make run did not serve /api/v1/health within 120 s:\n" + log.read_text())


def start(data: Path, port: int, log: Path) -> subprocess.Popen:
    env = {
        k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "KUBECONFIG"}
    }
    env.update(
        PORT=str(port),
        ADMIN_PASSWORD="correct-horse-battery",
        RECONCILE_INTERVAL_SECONDS="1",
        INVENTORY_SYNC_INTERVAL_SECONDS="1",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "devstack", "run", "--data", str(data)],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def stop_with_ctrl_c(process: subprocess.Popen) -> dict[int, str]:
    """SIGINT the launcher as a terminal's Ctrl-C would; return the children it had."""
    children = {c.pid: " ".join(c.cmdline()) for c in psutil.Process(process.pid).children(True)}
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    return children


def stop_whatever_is_left(process: subprocess.Popen) -> None:
    """After a failed test: stop the stack as SIGTERM does, and kill what still runs (its
    processes have sessions of their own, so killing the group alone would leave them)."""
    if process.poll() is not None:
        return
    children = psutil.Process(process.pid).children(recursive=True)
    leader = os.getpgid(process.pid) == process.pid  # started in a session of its own
    if leader:
        os.killpg(process.pid, signal.SIGTERM)
    else:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
    _gone, alive = psutil.wait_procs(children, timeout=10)
    for child in alive:
        child.kill()


def order_and_wait_for_running(
    base: str, key: str, name: str = "demo-instance", **extra: str
) -> dict:
    """What the printed curl example does, then poll until the observer has seen it run."""
    request = urllib.request.Request(
        f"{base}/api/v1/gpu-units",
        data=json.dumps(
            {
                "operationID": f"{name}-001",
                "name": name,
                "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
                "image": "python:3.12",
                **extra,
            }
        ).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        unit = json.loads(get(f"{base}/api/v1/gpu-units/{name}", key)[1])["data"]
        if unit["phase"] == "Running":
            return unit
        time.sleep(0.5)
    pytest.fail(f"the unit {name} did not reach Running: {unit}")


def wait_for_regions(base: str, key: str) -> dict[str, dict]:
    """Both development clusters listed (by the observer of each) and reachable."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        regions = {r["name"]: r for r in json.loads(get(f"{base}/api/v1/regions", key)[1])["data"]}
        health = [c["health"] for r in regions.values() for c in r["clusters"]]
        if sorted(regions) == ["default", "eu-west"] and set(health) == {"reachable"}:
            return regions
        time.sleep(0.5)
    pytest.fail(f"the two regions are not both reachable: {regions}")


def wait_for_inventory(base: str, key: str, cluster: str = "default") -> dict:
    """The observer mirrors the demo unit's allocation into its cluster's inventory."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, body = get(f"{base}/api/v1/operator/inventory?cluster={cluster}", key)
        if status == 200 and json.loads(body)["data"]["draAllocatedDevices"] >= 2:
            return json.loads(body)["data"]
        time.sleep(0.5)
    pytest.fail(f"the inventory did not show the demo unit: {status} {body[:300]!r}")


@pytest.mark.long
def identities(process: subprocess.Popen) -> dict[str, set[str]]:
    """Each process of make run (by the Deployment it stands for) -> who the API server takes
    each of its kubeconfigs for (a SelfSubjectReview), or {"none"} when it holds none."""
    roles = {
        "gunicorn": "web",
        "webhooks@": "webhooks",
        "celery -A controlplane worker": "worker",
        "manage.py observe": "observer",
        "celery -A controlplane beat": "beat",
    }
    found: dict[str, set[str]] = {}
    for child in psutil.Process(process.pid).children(recursive=True):
        command = " ".join(child.cmdline())
        role = next((r for key, r in roles.items() if key in command), None)
        if role is None or role in found:
            continue
        env = child.environ()
        folder = Path(env["CLUSTER_CREDENTIALS_DIR"])
        kubeconfigs = [env["KUBECONFIG"]] if env.get("KUBECONFIG") else []
        kubeconfigs += [str(path) for path in sorted(folder.glob("kubeconfig-*"))]
        found[role] = {whoami(path) for path in kubeconfigs} or {"none"}
    return found


def whoami(kubeconfig: str) -> str:
    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    with api:
        review = kubernetes.client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
    return review.status.user_info.username


def test_make_run_serves_api_and_admin_and_stops_on_ctrl_c(tmp_path):
    # The web port and the four after it (the worker's and the observer's /metrics, the two
    # development clusters' gateways).
    port, data, log = free_port_block(5), tmp_path / "devdata", tmp_path / "run.log"
    base = f"http://127.0.0.1:{port}"
    process = start(data, port, log)
    try:
        wait_until_up(base, process, log)
        status, body = get(f"{base}/api/v1/health")
        assert json.loads(body)["data"]["checks"]["database"]["ok"] is True
        status, body = get(f"{base}/admin/login/")
        assert status == 200
        assert b"GPU control plane" in body
        key = (data / "demo-api-key").read_text().strip()
        assert (data / "operator-api-key").read_text().startswith("gcp_")
        assert "current-context" in (data / "kubeconfig").read_text()
        status, body = get(f"{base}/api/v1/packages", key)
        assert len(json.loads(body)["data"]) == len(SAMPLE_PACKAGES)
        # Two regions: the first cluster and eu-west, each with a kubeconfig of its own.
        assert (data / "kubeconfig-default").read_text() == (data / "kubeconfig").read_text()
        assert "current-context" in (data / "kubeconfig-eu-west").read_text()
        wait_for_regions(base, key)
        # Each development cluster's gateway (web port + 3, + 4): no route for a bare address.
        for gateway in (port + 3, port + 4):
            status, body = get(f"http://127.0.0.1:{gateway}/")
            assert (status, b"No HTTPRoute attached" in body) == (404, True), body
        unit = order_and_wait_for_running(base, key)
        assert unit["draStatus"]["allocated"] is True
        west = order_and_wait_for_running(base, key, "west-instance", region="eu-west")
        assert (west["cluster"], west["region"]) == ("eu-west", "eu-west")
        operator_key = (data / "operator-api-key").read_text().strip()
        assert wait_for_inventory(base, operator_key, "eu-west")["totalGpuAllocatable"] == 4
        # Placed where most units of it fit: the sample topology's 8 RTX 3080s, not eu-west's 4.
        assert unit["cluster"] == "default"
        inventory = wait_for_inventory(base, operator_key)
        # The sample topology: 3 nodes x 8 whole GPUs, 2 shared ones, 2 split into 6 MIG devices,
        # and a partitionable one published whole and as its 18 MIG placements.
        assert inventory["totalGpuAllocatable"] == 24 + 2 + 6 + 1 + 18
        observer = json.loads(get(f"{base}/api/v1/health")[1])["data"]["checks"]["observer"]
        assert observer["ok"] is True, observer
        # /metrics on web, worker (web port + 1) and observer (+ 2), as the banner says.
        # The demo unit and the one in eu-west.
        assert 'controlplane_units{phase="Running"} 2.0' in get(f"{base}/metrics")[1].decode()
        worker_metrics = get(f"http://127.0.0.1:{port + 1}/metrics")[1].decode()
        assert 'controlplane_kube_requests_total{outcome="ok",verb="create"}' in worker_metrics
        observer_metrics = get(f"http://127.0.0.1:{port + 2}/metrics")[1].decode()
        assert 'controlplane_observer_leading{cluster="default"} 1.0' in observer_metrics
        # All that ran above, each process did with its Deployment's own ServiceAccount token
        # of each cluster, under k8s/'s RBAC and admission policies (issue 41).
        account = "system:serviceaccount:gpu-control-plane:gpu-control-plane"
        assert identities(process) == {
            "web": {f"{account}-unprivileged"},
            "worker": {account},
            "observer": {account},
            "webhooks": {"none"},
            "beat": {"none"},
        }
        children = stop_with_ctrl_c(process)
    finally:
        stop_whatever_is_left(process)
    commands = " | ".join(children.values())
    for expected in (
        "redis-server",
        "kube-apiserver",
        "etcd",
        "kwok",
        "gunicorn",
        "worker",
        "observe",
        "beat",
    ):
        assert expected in commands
    assert not [pid for pid in children if psutil.pid_exists(pid)]
    with pytest.raises(urllib.error.URLError, match="refused"):
        get(f"{base}/api/v1/health")
    assert not (data / "postgres" / "pgdata" / "postmaster.pid").exists()

    # A restart keeps the data: the sample is not imported twice, the admin is kept.
    restarted_at = datetime.now(UTC)
    process = start(data, port, log)
    try:
        wait_until_up(base, process, log)
        # The previous run's heartbeat (still in Redis's AOF) is not this run's worker.
        worker = json.loads(get(f"{base}/api/v1/health")[1])["data"]["checks"]["worker"]
        if worker["ok"]:
            assert datetime.fromisoformat(worker["lastHeartbeat"]) >= restarted_at, worker
        packages = json.loads(get(f"{base}/api/v1/packages", key)[1])["data"]
        assert len(packages) == len(SAMPLE_PACKAGES)  # imported once, not twice
        unit = json.loads(get(f"{base}/api/v1/gpu-units/demo-instance", key)[1])["data"]
        assert unit["phase"] == "Running"  # the cluster's objects persisted too
        stop_with_ctrl_c(process)
    finally:
        stop_whatever_is_left(process)
    output = log.read_text()
    assert "catalog already has packages" in output
    assert "superuser 'admin': password set from ADMIN_PASSWORD" in output
    assert "created dashboard user 'demo' for tenant default" in output
