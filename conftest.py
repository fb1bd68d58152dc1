"""Shared pytest fixtures: API clients and a real Celery worker process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent

# Property tests assert what holds, not how fast one example runs: on a two-core machine
# that is also running the simulated clusters, the session's worker and a collector pass,
# an example can take longer than Hypothesis's 200 ms default deadline.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def tenant(db):
    from tenancy.tests.factories import TenantFactory

    return TenantFactory()


@pytest.fixture
def auth_client(tenant):
    """An API client that sends a key of `tenant`."""
    from rest_framework.test import APIClient

    from tenancy.tests.factories import key_for

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(tenant)}")
    return client


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """The simulated cluster (sample topology) over HTTP, with the GPUUnit CRD installed.
    This process and the Celery worker both reach it through KUBECONFIG."""
    from django.conf import settings

    from controlplane import kube
    from runtime.provisioning import install_crd
    from simcluster.cluster import SimCluster

    # Device health is tested with DeviceTaintRules, off by default in 1.36 as in a real
    # cluster: this one has turned them on.
    sim = SimCluster(topology=None, feature_gates={"DRADeviceTaintRules": True}).start()
    kubeconfig = sim.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    os.environ["KUBECONFIG"] = str(kubeconfig)
    settings.KUBECONFIG = str(kubeconfig)
    kube.reset()
    install_crd()
    yield sim
    sim.stop()
    kube.reset()


def start_worker(name: str, **extra_env: str) -> subprocess.Popen:
    """Start a real `celery worker` subprocess on the test database, Redis and cluster, and
    wait until it answers a ping. Its node name is `<name>@<host>`."""
    from django.conf import settings

    from controlplane.celery import app

    env = dict(os.environ)
    test_db = settings.DATABASES["default"]["NAME"]
    base, _, query = os.environ["DATABASE_URL"].partition("?")
    env["DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + test_db + (f"?{query}" if query else "")
    # Short retry ceilings (half the stale threshold) and call timeouts keep fault tests quick.
    env.setdefault("OPERATION_STALE_SECONDS", "10")
    env.setdefault("KUBE_REQUEST_TIMEOUT", "2")
    # Fault scenarios test convergence; the attempt cap has its own test.
    env.setdefault("OPERATION_MAX_ATTEMPTS", "50")
    env.update(extra_env)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "worker",
            "--hostname",
            f"{name}@%h",
            "--pool",
            "threads",
            "--concurrency",
            "4",
            "--loglevel",
            "WARNING",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"celery worker exited with {process.returncode}")
        replies = app.control.ping(timeout=0.5)
        if any(name in host.split("@")[0] for reply in replies for host in reply):
            return process
    process.kill()
    raise RuntimeError("celery worker did not answer ping within 60 s")


def start_beat(tmp_path, **extra_env: str) -> subprocess.Popen:
    """Start a real `celery beat` on the test database and Redis (its schedule file in
    `tmp_path`); the tasks it sends go to whichever worker consumes."""
    from django.conf import settings

    env = dict(os.environ)
    test_db = settings.DATABASES["default"]["NAME"]
    base, _, query = os.environ["DATABASE_URL"].partition("?")
    env["DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + test_db + (f"?{query}" if query else "")
    env.update(extra_env)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "beat",
            "--schedule",
            str(tmp_path / "beat-schedule"),
            "--loglevel",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )


def stop_worker(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker, cluster):
    """The suite's real Celery worker (node name `session@<host>`)."""
    process = start_worker("session")
    yield process
    stop_worker(process)


def start_observer(name: str) -> subprocess.Popen:
    """Start `manage.py observe` on the test database, Redis and cluster, and wait until it
    leads and has listed the cluster (its status in Redis says so)."""
    from django.conf import settings

    from runtime.observer import read_status

    env = dict(os.environ)
    test_db = settings.DATABASES["default"]["NAME"]
    base, _, query = os.environ["DATABASE_URL"].partition("?")
    env["DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + test_db + (f"?{query}" if query else "")
    env["OBSERVER_LEAD_RETRY_SECONDS"] = "0.5"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "observe"], cwd=ROOT, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"observer {name} exited with {process.returncode}")
        status = read_status() or {}
        ours = status.get("identity", "").endswith(f":{process.pid}")
        if ours and status.get("leading") and status.get("synced"):
            return process
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"observer {name} did not lead within 60 s")


@pytest.fixture
def session_worker_paused():
    """Only the workers a test starts may take tasks while it runs: the session's worker (if
    one is up) stops consuming until the test ends. What the test left queued is discarded
    before it consumes again: those tasks are the test's (an order no worker was meant to
    take), and carried out after it they would create objects its cleanup has already
    swept, or race the database flush."""
    from controlplane.celery import app

    def session_nodes() -> list[str]:
        replies = app.control.ping(timeout=1)
        return [host for reply in replies for host in reply if host.startswith("session@")]

    nodes = session_nodes()
    if nodes:
        app.control.cancel_consumer("celery", destination=nodes, reply=True)
    yield
    app.control.purge()
    if nodes:
        app.control.add_consumer("celery", destination=nodes, reply=True)


@pytest.fixture(autouse=True)
def _session_worker_idle_before_flush(request):
    """A transactional test's database is flushed (TRUNCATE) when it ends; a task the
    session's worker is still carrying out for it (the last action a test asked for) holds
    row locks the TRUNCATE waits on while the task waits on it: a deadlock that fails the
    flush and leaves rows behind for the next test. So after such a test the worker stops
    taking tasks and finishes what it has, what is still queued is discarded, and the worker
    takes tasks again when the next test starts."""
    from controlplane.celery import app

    paused = request.config.stash.get(_PAUSED_NODES, [])
    if paused:
        app.control.add_consumer("celery", destination=paused, reply=True)
        request.config.stash[_PAUSED_NODES] = []
    yield
    marker = request.node.get_closest_marker("django_db")
    if "celery_worker" not in request.fixturenames or not (
        marker and marker.kwargs.get("transaction")
    ):
        return
    nodes = [f"session@{socket.gethostname()}"]  # start_worker's --hostname (name@%h)
    app.control.cancel_consumer("celery", destination=nodes, reply=True)
    request.config.stash[_PAUSED_NODES] = nodes
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        inspect = app.control.inspect(destination=nodes, timeout=1)
        # Tasks being carried out, and those received but waiting for a thread (prefetch).
        # No reply within the timeout says nothing about the worker: ask again.
        held = [inspect.active(), inspect.reserved()]
        if all(reply is not None and not any(reply.get(node) for node in nodes) for reply in held):
            app.control.purge()  # what the test left queued is its own (see above)
            return
        time.sleep(0.1)


_PAUSED_NODES = pytest.StashKey[list]()
