"""Shared plumbing for the benchmarks: a fresh database and Redis db per script, production-mode
settings, a gunicorn server, Celery processes, development clusters (devstack/cluster.py: the
real API server, scheduler and controller-manager, KWOK nodes), what the direct baselines
create straight against them, and a loopback load generator with persistent connections.

Every script needs DATABASE_URL and REDIS_URL (`python -m devstack exec --` provides them).
With BENCH_SMALL=1 each script runs at a few sizes small enough to check that it works end to
end on a busy machine; its figures then say so (`"small": true`) and are not the benchmark's."""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from devstack.cluster import DevCluster  # noqa: E402 - once ROOT is importable

# The machine has 2 cores: 2 gunicorn workers x 4 threads serve, 8 client connections load.
SERVER_WORKERS = int(os.environ.get("BENCH_SERVER_WORKERS", "2"))
SERVER_THREADS = int(os.environ.get("BENCH_SERVER_THREADS", "4"))
CONCURRENCY = 8
SERVER_DESCRIPTION = (
    f"gunicorn {SERVER_WORKERS} workers x {SERVER_THREADS} threads (gthread), "
    "DJANGO_DEBUG=0, bench.settings"
)
STATEMENTS_HEADER = "X-Bench-Statements"
# Figures land here as one JSON line per script (make bench), for bench/report.py.
RESULTS = ROOT / "test-artifacts" / "benchmarks.jsonl"
# Each script gets its own Redis database, so queued tasks never leak between scripts.
_REDIS_DB = {
    "api_create": 1,
    "api_list": 2,
    "inventory": 3,
    "end_to_end": 4,
    "profile": 5,
    "time_to_running": 6,
    "observer_cost": 7,
    "ledger": 8,
    "two_clusters": 9,
}


# BENCH_SMALL=1: every script at sizes that only check it works (see the module's docstring).
SMALL = os.environ.get("BENCH_SMALL", "") not in ("", "0")
Size = TypeVar("Size")


def sized(full: Size, small: Size) -> Size:
    """`full`, or `small` when the run is small (BENCH_SMALL=1)."""
    return small if SMALL else full


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def emit(figures: dict[str, Any]) -> None:
    """The script's one line of output (a small run's says so)."""
    if SMALL:
        figures = {**figures, "small": True}
    print(json.dumps(figures), flush=True)


def _database(url: str, name: str) -> str:
    """Create an empty database `name` next to the one `url` names; return its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _redis(url: str, db: int) -> str:
    import redis

    parts = urlsplit(url)
    fresh = urlunsplit(parts._replace(path=f"/{db}"))
    redis.Redis.from_url(fresh).flushdb()
    return fresh


def setup(name: str, **extra: str) -> dict[str, str]:
    """Fresh database and Redis db for script `name`, production-mode settings in os.environ
    (inherited by every server this script starts), Django set up and migrated."""
    missing = [v for v in ("DATABASE_URL", "REDIS_URL") if not os.environ.get(v)]
    if missing:
        raise SystemExit(
            f"{', '.join(missing)} not set: run under `python -m devstack exec --` (make bench)"
        )
    env = {
        "DATABASE_URL": _database(os.environ["DATABASE_URL"], f"bench_{name}"),
        "REDIS_URL": _redis(os.environ["REDIS_URL"], _REDIS_DB[name]),
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "bench-" + secrets.token_urlsafe(32),
        "METRICS_TOKEN": "bench-" + secrets.token_urlsafe(16),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "0",
        "API_THROTTLE_RATE": "100000000/min",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **extra,
    }
    env.pop("CELERY_BROKER_URL", None)
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return dict(os.environ)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(port: int, path: str, *, timeout: float, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[:4]} exited with {process.returncode}")
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            conn.getresponse().read()
            conn.close()
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing answered on port {port} within {timeout}s")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def gunicorn() -> Iterator[int]:
    """The product behind gunicorn with bench settings; yields its port."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "controlplane.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(SERVER_WORKERS),
            "--threads",
            str(SERVER_THREADS),
            "--worker-class",
            "gthread",
            "--keep-alive",
            "30",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=dict(os.environ),
    )
    try:
        _wait_http(port, "/bench/units?tenant=0&limit=1", timeout=60, process=process)
        _servers[port] = process
        yield port
    finally:
        _servers.pop(port, None)
        _stop(process)


_servers: dict[int, subprocess.Popen] = {}


def gunicorn_pid(port: int) -> int:
    """The pid of the gunicorn master serving `port` (its workers are its children)."""
    return _servers[port].pid


@contextlib.contextmanager
def celery(*args: str) -> Iterator[subprocess.Popen]:
    """`celery -A controlplane <args>` with the bench environment."""
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "controlplane", *args, "--loglevel", "WARNING"],
        cwd=ROOT,
        env=dict(os.environ),
    )
    try:
        yield process
    finally:
        _stop(process)


# Listing 10,000 units' objects from a real API server takes a while.
OBSERVER_START_SECONDS = 300


@contextlib.contextmanager
def observer() -> Iterator[subprocess.Popen]:
    """`manage.py observe` with the bench environment, once it leads and has listed the
    cluster."""
    from runtime.control.observer import read_status

    process = subprocess.Popen(
        [sys.executable, "manage.py", "observe"], cwd=ROOT, env=dict(os.environ)
    )
    try:
        deadline = time.monotonic() + OBSERVER_START_SECONDS
        while True:
            status = read_status() or {}
            if status.get("identity", "").endswith(f":{process.pid}") and status.get("synced"):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the observer did not lead and list the cluster within "
                    f"{OBSERVER_START_SECONDS} s"
                )
            time.sleep(0.1)
        yield process
    finally:
        _stop(process)


def use_cluster(kubeconfig: Path) -> None:
    """Point this process (and servers started afterwards) at a cluster."""
    from django.conf import settings

    from controlplane import kube

    os.environ["KUBECONFIG"] = str(kubeconfig)
    settings.KUBECONFIG = str(kubeconfig)
    kube.reset()


@contextlib.contextmanager
def count_statements() -> Iterator[list[int]]:
    """In-process statement counter: `with count_statements() as n: ...; n[0]`."""
    from django.db import connection

    counted = [0]

    def counter(execute: Callable, sql: str, params: Any, many: bool, context: dict) -> Any:
        counted[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counter):
        yield counted


# --- load -------------------------------------------------------------------------------------

# method, path, body, headers
Request = tuple[str, str, bytes | None, dict[str, str]]


@dataclass
class LoadResult:
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    statements: Counter = field(default_factory=Counter)
    sent_at: dict[int, float] = field(default_factory=dict)
    bodies: int = 0

    @property
    def requests(self) -> int:
        return len(self.latencies)

    @property
    def rps(self) -> float:
        return self.requests / self.elapsed if self.elapsed else 0.0

    def percentile_ms(self, q: int) -> float:
        if len(self.latencies) < 2:
            return round(self.latencies[0] * 1000, 2) if self.latencies else 0.0
        return round(statistics.quantiles(self.latencies, n=100)[q - 1] * 1000, 2)

    def statements_per_request(self) -> int | None:
        """The most common count (they should all be equal); None if the header was absent."""
        return self.statements.most_common(1)[0][0] if self.statements else None

    def check(self, *allowed: int) -> None:
        bad = {s: n for s, n in self.statuses.items() if s not in allowed}
        if bad:
            raise RuntimeError(f"unexpected responses {bad} (wanted {allowed})")


CPU_GROUPS = ("server", "postgres", "redis", "client")


def cpu_seconds(port: int) -> dict[str, float]:
    """CPU seconds used so far by the gunicorn serving `port` (master and workers), PostgreSQL
    (postmaster and backends), Redis, and this process (the load generator): read before and
    after a load run, it says where each request's CPU went on a machine where CPU is the
    limit. A process's reaped children count through its children_* times, so backends that
    exit between two readings are not lost."""
    import psutil

    def tree_seconds(root: psutil.Process) -> float:
        total = 0.0
        for process in [root, *root.children(recursive=True)]:
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        return total

    totals = dict.fromkeys(CPU_GROUPS, 0.0)
    me = psutil.Process()
    times = me.cpu_times()
    totals["client"] = times.user + times.system
    for process in psutil.process_iter(["name", "cmdline", "ppid"]):
        try:
            command = " ".join(process.info["cmdline"] or [])
            parent = psutil.Process(process.info["ppid"]) if process.info["ppid"] else None
            parent_command = " ".join(parent.cmdline()) if parent else ""
            if "gunicorn" in command and f"127.0.0.1:{port}" in command:
                group = "server"
                is_root = f"127.0.0.1:{port}" not in parent_command
            elif "/bin/postgres" in command:
                group = "postgres"  # the postmaster; backends are its children
                is_root = True
            elif "redis-server" in command:
                group = "redis"
                is_root = "redis-server" not in parent_command
            else:
                continue
            if is_root:
                totals[group] += tree_seconds(process)
        except psutil.Error:
            continue  # exited while we looked
    return totals


def run_load(
    port: int,
    make_request: Callable[[int, int], Request],
    *,
    concurrency: int = CONCURRENCY,
    duration: float | None = None,
    total: int | None = None,
) -> LoadResult:
    """`concurrency` threads, one persistent HTTP/1.1 connection each, send
    make_request(i, thread number) for i = 0, 1, ... until `duration` seconds passed or `total`
    requests were sent."""
    result = LoadResult()
    numbers = itertools.count()
    lock = threading.Lock()
    start = time.perf_counter()
    deadline = start + duration if duration else float("inf")

    def worker(number: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        latencies: list[float] = []
        statuses: Counter = Counter()
        statements: Counter = Counter()
        sent: dict[int, float] = {}
        while True:
            index = next(numbers)
            if (total is not None and index >= total) or time.perf_counter() >= deadline:
                break
            method, path, body, headers = make_request(index, number)
            began = time.perf_counter()
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            latencies.append(time.perf_counter() - began)
            sent[index] = began
            statuses[response.status] += 1
            counted = response.getheader(STATEMENTS_HEADER)
            if counted is not None:
                statements[int(counted)] += 1
        conn.close()
        with lock:
            result.latencies.extend(latencies)
            result.statuses.update(statuses)
            result.statements.update(statements)
            result.sent_at.update(sent)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.elapsed = time.perf_counter() - start
    return result


def json_request(
    method: str, path: str, body: dict | None = None, key: str | None = None
) -> Request:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return method, path, json.dumps(body).encode() if body is not None else None, headers


def median(values: list[float]) -> float:
    return statistics.median(values)


def ratio(numerator: float, denominator: float, digits: int = 2) -> float:
    return round(numerator / denominator, digits) if denominator else float("nan")


# --- fixtures ---------------------------------------------------------------------------------


def make_tenant(slug: str, *, operator: bool = False) -> tuple[Any, str]:
    """A tenant with a quota nothing in the bench reaches, and one API key."""
    from tenancy import services

    tenant = services.create_tenant(
        slug=slug,
        namespace=f"{slug}-ns",
        quota_cpu="1000000",
        quota_memory="100000Ti",
        quota_claims=1_000_000,
        quota_ephemeral_storage="100000Ti",
        is_operator=operator,
    )
    _api_key, key = services.create_api_key(tenant=tenant, name="bench")
    return tenant, key


def make_package(package_id: str = "bench-h100-1x", *, cpu: str = "1", memory: str = "1Gi") -> Any:
    from catalog.models import Package

    package = Package(
        id=package_id,
        spec_name=f"{package_id}.spec",
        cpu=cpu,
        memory=memory,
        gpu=1,
        device_class_name="nvidia-h100",
        claim_request_name="gpu",
        count=1,
    )
    package.full_clean()
    package.save()
    return package


def wait_for_worker() -> None:
    """Until a Celery worker answers a ping."""
    from controlplane.celery import app

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if app.control.ping(timeout=0.5):
            return
    raise RuntimeError("no celery worker answered within 60 s")


IMAGE = "ghcr.io/example/worker:1.0"


def unit_contract(package: Any, tenant: Any, name: str, namespace: str) -> Any:
    """The contract a unit of `package` named `name` gets when `tenant` orders it (the same
    fields GPUUnit.contract_fields snapshots): what its claim and pod are built from."""
    from runtime.models import GPUUnit

    unit = GPUUnit(
        tenant=tenant,
        name=name,
        namespace=namespace,
        operation_id=name,
        image=IMAGE,
        **GPUUnit.contract_fields(package, name=name),
    )
    return unit.contract(request_hash="-")


def direct_objects(package: Any, name: str, namespace: str) -> tuple[dict, dict]:
    """The claim and pod a unit of `package` named `name` gets, without its GPUUnit owner:
    what the direct baselines create straight against the cluster."""
    from runtime import manifests
    from tenancy.models import Tenant

    contract = unit_contract(package, Tenant(slug="bench-direct"), name, namespace)
    claim = manifests.build_resource_claim(contract, owner_uid="-")
    pod = manifests.build_pod(contract, owner_uid="-")
    for obj in (claim, pod):
        obj["metadata"].pop("ownerReferences", None)
    return claim, pod


def tenant_with_namespace(slug: str, namespace: str) -> Any:
    """The tenant `slug` in `namespace`, created with a quota nothing in the bench reaches."""
    from tenancy import services
    from tenancy.models import Tenant

    return Tenant.objects.filter(slug=slug).first() or services.create_tenant(
        slug=slug,
        namespace=namespace,
        quota_cpu="1000000",
        quota_memory="100000Ti",
        quota_claims=1_000_000,
        quota_ephemeral_storage="100000Ti",
    )


def api_key(tenant: Any) -> str:
    from tenancy import services

    return services.create_api_key(tenant=tenant, name="bench")[1]


# --- development clusters ---------------------------------------------------------------------

H100 = "NVIDIA H100 80GB HBM3"
CLAIMS = ("resource.k8s.io/v1", "ResourceClaim")
PODS = ("v1", "Pod")


@contextlib.contextmanager
def dev_cluster(name: str, *, nodes: int, gpus_per_node: int = 8) -> Iterator[DevCluster]:
    """A development cluster of `nodes` identical nodes of H100s, in a temporary folder removed
    afterwards. Its processes die with the thread that starts them: the script's main thread.
    The product reaches it through `.kubeconfig` (no fault proxy: nothing in between), and no
    node agent writes container output (the load would fall on both halves of a comparison)."""
    folder = Path(tempfile.mkdtemp(prefix=f"bench-cluster-{name}-"))
    topology = {"generate": {"nodes": nodes, "gpus_per_node": gpus_per_node, "product": H100}}
    # A busy API server renews a fleet's node Leases late: with the tests' 20 s grace the
    # controller-manager took 530 of 1,250 nodes NotReady at 10,000 units (and the units'
    # pods with them). The kube-controller-manager's own default is 50 s.
    cluster = DevCluster(
        folder, name=name, topology=topology, container_output=False, node_monitor_grace="50s"
    )
    log(f"starting development cluster {name}: {nodes} nodes x {gpus_per_node} H100")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


def wait_until(condition: Callable[[], Any], what: str, *, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting until {what}")
        time.sleep(0.05)
    return found


def namespace_ready(cluster: DevCluster, namespace: str) -> None:
    """Until the controller-manager has made the namespace's ServiceAccount: the API server
    refuses pods (403) in a namespace that has none yet."""
    wait_until(
        lambda: cluster.api.get("v1", "ServiceAccount", "default", namespace),
        f"namespace {namespace} has its ServiceAccount",
    )


def direct_namespace(cluster: DevCluster, namespace: str) -> None:
    """A namespace for the direct baseline, admitting pods as a tenant's does (Pod Security
    restricted), once pods can be created in it."""
    from runtime import manifests

    cluster.api.apply(manifests.build_namespace(namespace, tenant=namespace))
    namespace_ready(cluster, namespace)


def tenant_namespace(cluster: DevCluster, tenant: Any, *, cluster_name: str = "") -> None:
    """The tenant's namespace and quota as provisioning makes them, made before a measurement
    (a tenant's first unit would otherwise race the controller-manager for the namespace's
    ServiceAccount); `cluster_name` a registered cluster, else the process's own."""
    from controlplane import kube
    from runtime.control.provisioning import ensure_tenant_namespace

    with kube.using(cluster_name or kube.HOME):
        ensure_tenant_namespace(tenant)
    namespace_ready(cluster, tenant.namespace)


class DirectClient:
    """Creates claims and pods straight against one cluster with the official kubernetes
    client (the one the product's calls go through), no GPUUnit, no control plane."""

    def __init__(self, cluster: DevCluster) -> None:
        from kubernetes import client, config

        api = config.new_client_from_config(str(cluster.admin_kubeconfig))
        self.core = client.CoreV1Api(api)
        self.resource = client.ResourceV1Api(api)

    def create(self, namespace: str, claim: dict, pod: dict) -> None:
        self.resource.create_namespaced_resource_claim(namespace, claim, _preload_content=False)
        self.core.create_namespaced_pod(namespace, pod, _preload_content=False)

    def pod_phase(self, namespace: str, name: str) -> str:
        pod = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        return (json.loads(pod.data).get("status") or {}).get("phase", "")


class PodsRunning:
    """When each pod of a namespace was first seen Running, from a watch on a thread of its
    own: listing hundreds of pods every 0.1 s would cost the API server more CPU than what it
    times on a two-core machine. `start()` before the pods are made."""

    def __init__(self, cluster: DevCluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.running: dict[str, float] = {}
        self._version = ""  # the resourceVersion the watch goes on from
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)

    def start(self) -> PodsRunning:
        listing = self.cluster.api.request("GET", self.cluster.api.path(*PODS, self.namespace))
        self._seen(listing["items"])
        self._version = listing["metadata"]["resourceVersion"]
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _seen(self, pods: Iterable[dict]) -> None:
        now = time.perf_counter()
        for pod in pods:
            metadata = pod.get("metadata") or {}
            phase = (pod.get("status") or {}).get("phase")
            if metadata.get("namespace") == self.namespace and phase == "Running":
                self.running.setdefault(metadata["name"], now)

    def _follow(self) -> None:
        from devstack.kubeapi import ApiError

        while not self._stopped.is_set():
            try:
                for event in self.cluster.api.watch(*PODS, resource_version=self._version):
                    if self._stopped.is_set():
                        return
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":  # too old a version: list again
                        raise ApiError(410, json.dumps(obj))
                    self._version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self._seen([obj])
            except Exception:  # a watch that ended or broke: list, then watch again
                if self._stopped.is_set():
                    return
                time.sleep(0.1)
                with contextlib.suppress(Exception):
                    listing = self.cluster.api.request(
                        "GET", self.cluster.api.path(*PODS, self.namespace)
                    )
                    self._seen(listing["items"])
                    self._version = listing["metadata"]["resourceVersion"]

    def wait(self, count: int, *, timeout: float) -> dict[str, float]:
        """Until `count` pods were seen Running; their names and times."""
        wait_until(
            lambda: len(self.running) >= count,
            f"{count} pods of {self.namespace} Running ({len(self.running)} are)",
            timeout=timeout,
        )
        self.stop()
        return dict(self.running)


def clear_namespace(cluster: DevCluster, namespace: str, *, timeout: float = 300.0) -> None:
    """Delete every pod (at once: no grace) and claim of `namespace`, and wait until they are
    gone, so their devices are free for what is measured next."""
    api = cluster.api
    api.request("DELETE", api.path(*PODS, namespace), query={"gracePeriodSeconds": "0"})
    api.request("DELETE", api.path(*CLAIMS, namespace))
    wait_until(
        lambda: (
            not api.list(*PODS, namespace, limit="1")
            and not api.list(*CLAIMS, namespace, limit="1")
        ),
        f"the pods and claims of {namespace} are gone",
        timeout=timeout,
    )


def create_units(
    cluster: DevCluster, contracts: Sequence[Any], *, threads: int = 4
) -> list[dict[str, Any]]:
    """Each contract's GPUUnit, claim and pod as provisioning makes them (the claim and pod
    owned by the GPUUnit), created from `threads` threads; returns the GPUUnits."""
    from runtime import manifests

    api = cluster.api

    def create(obj: dict) -> dict:
        metadata = obj["metadata"]
        path = api.path(obj["apiVersion"], obj["kind"], metadata.get("namespace"))
        return api.request("POST", path, obj)

    def unit(contract: Any) -> dict:
        gpuunit = create(manifests.build_gpuunit(contract))
        owner = gpuunit["metadata"]["uid"]
        create(manifests.build_resource_claim(contract, owner_uid=owner))
        create(manifests.build_pod(contract, owner_uid=owner))
        return gpuunit

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(unit, contracts))


def create_claims_and_pods(
    cluster: DevCluster, objects: Sequence[tuple[dict, dict]], *, threads: int = 4
) -> None:
    """Claims and their pods (no owner), created from `threads` threads."""
    api = cluster.api

    def create(pair: tuple[dict, dict]) -> None:
        for obj in pair:
            metadata = obj["metadata"]
            path = api.path(obj["apiVersion"], obj["kind"], metadata.get("namespace"))
            api.request("POST", path, obj)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(create, objects))
