"""Shared plumbing for the benchmarks: a fresh database and Redis db per script, production-mode
settings, a gunicorn server, Celery processes, the simulated cluster in a subprocess, and a
loopback load generator with persistent connections.

Every script needs DATABASE_URL and REDIS_URL (`python -m devstack exec --` provides them)."""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

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


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def emit(figures: dict[str, Any]) -> None:
    """The script's one line of output."""
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


@contextlib.contextmanager
def observer() -> Iterator[subprocess.Popen]:
    """`manage.py observe` with the bench environment, once it leads and has listed the
    cluster."""
    from runtime.control.observer import read_status

    process = subprocess.Popen(
        [sys.executable, "manage.py", "observe"], cwd=ROOT, env=dict(os.environ)
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            status = read_status() or {}
            if status.get("identity", "").endswith(f":{process.pid}") and status.get("synced"):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the observer did not lead and list the cluster within 60 s")
            time.sleep(0.1)
        yield process
    finally:
        _stop(process)


@contextlib.contextmanager
def simcluster(*args: str, module: str = "simcluster") -> Iterator[Path]:
    """The simulated cluster in its own process (so serving it does not share our GIL);
    yields the path of its kubeconfig."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-sim-"))
    kubeconfig = workdir / "kubeconfig"
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            module,
            "--port",
            str(port),
            "--kubeconfig-out",
            str(kubeconfig),
            *args,
        ],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
    )
    try:
        _wait_http(port, "/version", timeout=120, process=process)
        while not kubeconfig.exists():
            if process.poll() is not None:
                raise RuntimeError(f"{module} exited with {process.returncode}")
            time.sleep(0.05)
        yield kubeconfig
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


def direct_objects(package: Any, name: str, namespace: str) -> tuple[dict, dict]:
    """The claim and pod a unit of `package` named `name` gets, without its GPUUnit owner:
    what the direct baselines create straight against the cluster."""
    from runtime import manifests

    contract = manifests.UnitContract(
        name=name,
        namespace=namespace,
        tenant="bench",
        operation_id=name,
        request_hash="-",
        package_id=package.id,
        spec_name=package.spec_name,
        image="ghcr.io/example/worker:1.0",
        cpu=package.cpu,
        memory=package.memory,
        gpu=package.gpu,
        device_class_name=package.device_class_name,
        claim_name=manifests.claim_name_for(name),
        claim_request_name=package.claim_request_name,
        count=package.count,
    )
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
