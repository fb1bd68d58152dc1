"""Shared pytest fixtures: API clients and a real Celery worker process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Collection
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, settings
from xdist.scheduler import LoadGroupScheduling

ROOT = Path(__file__).resolve().parent

# Property tests assert what holds, not how fast one example runs: on a two-core machine
# that is also running the development clusters, the session's worker and a collector pass,
# an example can take longer than Hypothesis's 200 ms default deadline.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing():
    """Passwords made and checked in this process (dashboard users, admin logins) use a cheap
    hasher: the product's PBKDF2 spends about 0.3 s of CPU on each by design, and hundreds of
    tests make a user (Django's testing docs advise the same). The stacks the tests start as
    processes (make run, gunicorn, the workers) keep the product's hashers."""
    from django.test import override_settings  # its signal clears Django's hasher caches

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(scope="session", autouse=True)
def _live_server_backlog():
    """Give `live_server` a listen backlog like a production server's. Django's WSGIServer
    listens with a backlog of 10, so a test that opens 50 connections at once has some
    refused or reset before the server sees them, which is a fact about the test server,
    not about the product (gunicorn's default is 2048)."""
    from django.core.servers.basehttp import ThreadedWSGIServer
    from django.test.testcases import LiveServerThread

    class BackloggedServer(ThreadedWSGIServer):
        request_queue_size = 128

    original = LiveServerThread.server_class
    LiveServerThread.server_class = BackloggedServer
    yield
    LiveServerThread.server_class = original


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
def cluster_credentials(tmp_path_factory) -> Path:
    """CLUSTER_CREDENTIALS_DIR of this test process and the workers and observers it starts: a
    test that registers a cluster writes its kubeconfig here (`kubeconfig-<name>`)."""
    from django.conf import settings

    folder = tmp_path_factory.mktemp("credentials")
    os.environ["CLUSTER_CREDENTIALS_DIR"] = str(folder)
    settings.CLUSTER_CREDENTIALS_DIR = str(folder)
    return folder


@pytest.fixture(scope="session")
def cluster(tmp_path_factory, pytestconfig, cluster_credentials):
    """A development cluster of this test process (devstack/cluster.py: the real API server,
    scheduler and controller-manager, KWOK nodes of the sample topology) with the GPUUnit CRD
    installed. This process and the Celery worker both reach it through KUBECONFIG, which
    goes through its fault proxy (`cluster.faults`, `cluster.requests`). A test that uses it
    and leaves Pods or ResourceClaims in it fails (see "Objects a test leaves" below)."""
    from django.conf import settings

    from controlplane import kube
    from devstack.cluster import DevCluster
    from runtime.control.provisioning import install_crd

    dev = DevCluster(tmp_path_factory.mktemp("cluster"), proxy=True).start()
    os.environ["KUBECONFIG"] = str(dev.kubeconfig)
    settings.KUBECONFIG = str(dev.kubeconfig)
    kube.reset()
    install_crd()
    pytestconfig.stash[_SESSION_CLUSTER] = dev
    yield dev
    del pytestconfig.stash[_SESSION_CLUSTER]
    dev.stop()
    kube.reset()


def start_worker(name: str, *, queues: str = "", **extra_env: str) -> subprocess.Popen:
    """Start a real `celery worker` subprocess on the test database, Redis and cluster, and
    wait until it answers a ping. Its node name is `<name>@<host>`; with `queues`, it takes
    those alone (`-Q`: a worker of one cluster's queue)."""
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
    # Webhook tests receive on this machine, and see a retry soon after a refusal.
    env.setdefault("WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")
    env.setdefault("WEBHOOK_RETRY_FIRST_SECONDS", "0.5")
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
            *(["--queues", queues] if queues else []),
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
    """The suite's real Celery workers, as `make run` has them: `session@<host>` takes the
    default queue (and the clusters'), `hooks@<host>` the webhook deliveries alone
    (controlplane/queues.py). Yields the first."""
    process = start_worker("session")
    hooks = start_worker("hooks", queues="webhooks")
    yield process
    stop_worker(hooks)
    stop_worker(process)


def start_observer(name: str) -> subprocess.Popen:
    """Start `manage.py observe` on the test database, Redis and cluster, and wait until it
    leads and has listed the cluster (its status in Redis says so)."""
    from django.conf import settings

    from runtime.control.observer import read_status

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


# The queues each of the session's workers takes (the first also takes the clusters'):
# the default one, and the webhooks' (controlplane/queues.py).
SESSION_QUEUES = {"session": ("celery",), "hooks": ("webhooks",)}


def _consume(nodes: list[str], *, stop: bool) -> None:
    """Stop (or start again) the session's worker nodes `nodes` consuming their queues."""
    from controlplane.celery import app

    for node in nodes:
        for queue in SESSION_QUEUES[node.split("@")[0]]:
            if stop:
                app.control.cancel_consumer(queue, destination=[node], reply=True)
            else:
                app.control.add_consumer(queue, destination=[node], reply=True)


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
        return [host for reply in replies for host in reply if host.split("@")[0] in SESSION_QUEUES]

    nodes = session_nodes()
    _consume(nodes, stop=True)
    yield
    app.control.purge()
    _consume(nodes, stop=False)


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
        _consume(paused, stop=False)
        request.config.stash[_PAUSED_NODES] = []
    yield
    marker = request.node.get_closest_marker("django_db")
    if "celery_worker" not in request.fixturenames or not (
        marker and marker.kwargs.get("transaction")
    ):
        return
    # start_worker's --hostname (name@%h)
    nodes = [f"{name}@{socket.gethostname()}" for name in SESSION_QUEUES]
    _consume(nodes, stop=True)
    request.config.stash[_PAUSED_NODES] = nodes
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        inspect = app.control.inspect(destination=nodes, timeout=1)
        # Tasks being carried out, and those received but waiting for a thread (prefetch).
        # No reply within the timeout says nothing about the worker: ask again.
        held = [inspect.active(), inspect.reserved()]
        if all(reply is not None and not any(reply.get(node) for node in nodes) for reply in held):
            app.control.purge()  # what the test left queued is its own (see above)
            _audit_usage(request)
            return
        time.sleep(0.1)


def _audit_usage(request) -> None:
    """The usage audit over everything the test's units did (the database holds only this
    test's rows: each transactional test's are flushed after it), before the flush: a test
    whose units' ledger and timelines disagree by over a second fails, so across the suite
    every unit the real stack ran is billed for exactly the time its pods held devices
    (issue 26). Tests that plant a difference on purpose say so with `planted_usage`."""
    if request.node.get_closest_marker("planted_usage"):
        return
    from django.utils import timezone

    from runtime import usage_audit

    now = timezone.now()
    differences = usage_audit.audit(now - timedelta(days=3660), now, now=now)
    if differences:
        pytest.fail(
            f"{request.node.nodeid}: the usage audit found {len(differences)} difference(s): "
            + "; ".join(str(d) for d in differences),
            pytrace=False,
        )


_PAUSED_NODES = pytest.StashKey[list]()


# -- Objects a test leaves in the session's cluster ----------------------------------------------
#
# A test that uses the session's `cluster` owns the Pods and ResourceClaims it makes there and
# removes them (STYLE.md, Tests); one that does not fails. What a test made is what was not there
# before it: the guard notes the uids of the cluster's Pods and ResourceClaims when the test's
# function-scoped fixtures start (after the session's and module's, which made theirs already),
# and looks again when all of the test's teardown is done. Objects made by the cluster itself or
# by wider fixtures are there on both looks and never count: no names are listed.

_SESSION_CLUSTER = pytest.StashKey[Any]()  # the session's DevCluster while it runs
_LEAK_BASELINE = pytest.StashKey[tuple[Any, frozenset[str]]]()  # (DevCluster, uids before)


# Modules whose tests go to one `make test` process together, the rest being handed out one
# test at a time: their tests share a module fixture that is costly to make again.
WHOLE_MODULES = {
    "tests/test_readme.py",  # a `make run` stack
    "tests/test_deploy_rbac.py",  # the manifests rendered and applied with kubectl
    "tests/test_monitoring.py",  # the manifests rendered with kustomize
    # Each benchmark starts clusters and servers of its own: one after the other on one
    # process, not all at once beside the suite.
    "tests/test_bench_smoke.py",
}


def pytest_xdist_make_scheduler(config, log):
    """`make test`'s scheduler (--dist loadgroup): xdist's loadgroup, which hands out the
    tests one at a time in the order collected and a group whole (groups first), with the
    groups named here by module. xdist names a group by renaming a test's nodeid, which pytest
    9 no longer reads, so its xdist_group marker groups nothing."""
    if config.getoption("dist") != "loadgroup":
        return None

    class WholeModules(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in WHOLE_MODULES else super()._split_scope(nodeid)

    return WholeModules(config, log)


def pytest_collection_modifyitems(config, items):
    """Tests marked `long` first, each group in its collected order: `make test` hands tests
    to its parallel workers in this order (one at a time, or a module of WHOLE_MODULES whole,
    those first), so the few that run for a minute or more start at once instead of being the
    last ones a worker is left with."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


def pytest_addoption(parser):
    parser.addoption(
        "--cluster-leak-timeout",
        type=float,
        default=20.0,
        help="seconds a Pod or ResourceClaim a test made in the session's cluster may take to "
        "go after the test's teardown before the test fails for leaving it (default 20)",
    )


class LeftObject(NamedTuple):
    """A Pod or ResourceClaim still in the cluster."""

    kind: str
    namespace: str
    name: str
    state: str  # "" or how far its deletion got

    def __str__(self) -> str:
        where = f"{self.kind} {self.namespace}/{self.name}"
        return f"{where} ({self.state})" if self.state else where


def cluster_objects(dev) -> dict[str, LeftObject]:
    """The Pods and ResourceClaims in a development cluster, by uid (two list calls: cheap
    enough to run around every test)."""
    found = {}
    for obj in dev.objects():
        metadata = obj["metadata"]
        state = ""
        if metadata.get("deletionTimestamp"):
            finalizers = metadata.get("finalizers") or []
            state = f"deleting since {metadata['deletionTimestamp']}" + (
                f", finalizers {finalizers}" if finalizers else ""
            )
        found[metadata["uid"]] = LeftObject(
            obj["kind"], metadata.get("namespace") or "", metadata["name"], state
        )
    return found


def objects_left(dev, baseline: Collection[str], timeout: float) -> list[LeftObject]:
    """The Pods and ResourceClaims in `dev` whose uids are not in `baseline`, [] as soon as
    there are none, else those still there after `timeout` seconds. Their removal may be under
    way when a test ends (a unit being torn down, a pod or claim held by a finalizer): an
    object that goes, through whatever deletion, counts as gone; one made again under the same
    name is a new object (a new uid)."""
    deadline = time.monotonic() + timeout
    while True:
        left = sorted(
            (obj for uid, obj in cluster_objects(dev).items() if uid not in baseline),
            key=lambda obj: (obj.kind, obj.namespace, obj.name),
        )
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)  # then look again: the deadline bounds the wait, the look ends it


@pytest.fixture(autouse=True)
def _cluster_leak_baseline(request):
    """Note what the session's cluster holds as a test that uses it starts. The root conftest's
    autouse fixtures are set up after every session- and module-scoped fixture and before the
    function-scoped ones the test, its module or a nearer conftest asks for (only plugins'
    autouse ones, pytest-django's database, come first): what those make counts as the
    test's."""
    dev = request.config.stash.get(_SESSION_CLUSTER, None)
    if dev is not None and "cluster" in request.fixturenames:
        request.node.stash[_LEAK_BASELINE] = (dev, frozenset(cluster_objects(dev)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Fail a test that left Pods or ResourceClaims in the session's cluster: after all of its
    teardown (its fixtures' finalizers, including the worker's pause and the database flush),
    wait up to --cluster-leak-timeout for what it made to go; what is still there is named in
    an error at its teardown (so the session fails) and then deleted, so the tests after it
    start with the cluster they expect."""
    baseline = item.stash.get(_LEAK_BASELINE, None)
    if baseline is None:
        return (yield)
    dev, uids = baseline
    timeout = item.config.getoption("cluster_leak_timeout")

    def check() -> None:
        if (item.funcargs or {}).get("cluster") is not dev:
            return  # a fixture of its own named `cluster`
        left = objects_left(dev, uids, timeout)
        if not left:
            return
        for obj in left:
            dev.remove(obj.kind, obj.namespace, obj.name)
        pytest.fail(
            f"{item.nodeid} left {len(left)} object(s) in the session's cluster, still there "
            f"{timeout:g} s after its teardown (now deleted by the leak guard): "
            + "; ".join(str(obj) for obj in left),
            pytrace=False,
        )

    parent = item.parent
    if parent is not None and (nextitem is None or parent not in nextitem.listchain()):
        # This teardown also ends the item's parent (the last test of its class or module, or
        # of the session): wider fixtures end with it, the session's cluster and worker among
        # them. A finalizer added to the parent now is the first of its own to run, right after
        # the item's: the check sees the cluster and worker as the test left them.
        parent.addfinalizer(check)
        return (yield)
    result = yield
    check()
    return result
