"""Health checks: each dependency answers quickly or is reported down, never hangs the probe.

Apps above this layer add their own checks from their AppConfig.ready() (`register`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.db import connection

from controlplane import kube

logger = logging.getLogger(__name__)

HEARTBEAT_KEY = "controlplane:heartbeat"

# name -> a callable returning {"ok": bool, ...}; filled by apps' ready().
_registered: dict[str, tuple[Callable[[], dict], bool]] = {}


def register(name: str, check: Callable[[], dict], *, beside: bool = False) -> None:
    """Report `check()` under `name` in every health report. With `beside`, it runs next to
    the database check, on a thread of its own (for checks that wait on the network, not on
    Django's database connection, which belongs to the request's thread)."""
    _registered[name] = (check, beside)


@dataclass(frozen=True)
class Check:
    ok: bool
    latency_ms: float
    error: str = ""

    def as_dict(self) -> dict:
        body: dict = {"ok": self.ok, "latencyMs": round(self.latency_ms, 2)}
        if self.error:
            body["error"] = self.error
        return body


def _timed(probe: Callable[[], object]) -> Check:
    started = time.perf_counter()
    try:
        probe()
    except Exception as exc:  # a health probe reports every failure instead of raising
        # The report is public: it names the kind of failure, never its text (hosts,
        # addresses, credentials' paths), which goes to the log.
        logger.warning("health probe %s failed: %s", getattr(probe, "__name__", probe), exc)
        return Check(False, (time.perf_counter() - started) * 1000, type(exc).__name__)
    return Check(True, (time.perf_counter() - started) * 1000)


def _redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.CELERY_BROKER_URL, socket_connect_timeout=1, socket_timeout=1
    )


def check_database() -> Check:
    def probe() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")

    return _timed(probe)


def check_broker() -> Check:
    return _timed(lambda: _redis().ping())


def check_cluster() -> Check:
    def probe() -> None:
        kube.version(timeout=settings.HEALTH_CLUSTER_TIMEOUT)

    return _timed(probe)


def record_heartbeat() -> None:
    _redis().set(HEARTBEAT_KEY, datetime.now(UTC).isoformat())


def last_heartbeat() -> datetime | None:
    try:
        raw = _redis().get(HEARTBEAT_KEY)
    except redis.RedisError:
        return None
    if not raw:
        return None
    return datetime.fromisoformat(raw.decode() if isinstance(raw, bytes) else raw)


# Redis and the cluster are probed next to the database check, so one probe takes as long as
# the slowest dependency rather than all of them together (each has its own timeout).
_probes = ThreadPoolExecutor(max_workers=6, thread_name_prefix="health")


def _broker_and_heartbeat() -> tuple[Check, datetime | None]:
    broker = check_broker()
    return broker, last_heartbeat() if broker.ok else None


def report() -> tuple[bool, dict]:
    """Return (ready, body). Only the database decides readiness: with the broker or the
    cluster down the API still accepts work (it is recorded and carried out later)."""
    redis_probe = _probes.submit(_broker_and_heartbeat)
    alongside = {
        name: _probes.submit(check) for name, (check, beside) in _registered.items() if beside
    }
    cluster_probe = _probes.submit(check_cluster)
    database = check_database()  # Django's connection belongs to this thread
    broker, beat = redis_probe.result()
    checks: dict[str, dict] = {
        "database": database.as_dict(),
        "broker": broker.as_dict(),
        "cluster": cluster_probe.result().as_dict(),
    }
    stale_after = settings.HEARTBEAT_INTERVAL_SECONDS * 3
    worker_ok = beat is not None and (datetime.now(UTC) - beat).total_seconds() <= stale_after
    checks["worker"] = {"ok": worker_ok, "lastHeartbeat": beat.isoformat() if beat else None}
    for name, (check, beside) in _registered.items():
        checks[name] = alongside[name].result() if beside else check()
    if not database.ok:
        status = "down"
    elif all(check["ok"] for check in checks.values()):
        status = "ok"
    else:
        status = "degraded"
    return database.ok, {"status": status, "checks": checks}
