"""Prometheus metrics (ARCHITECTURE §13): the metric objects every process updates, the
scrape-time collectors the apps above register, and the text exposition.

Processes that fork workers (gunicorn, Celery prefork) set PROMETHEUS_MULTIPROC_DIR to an
empty directory before they start: each child then writes its samples there and one
exposition sums them. Without it (the observer, tests) a process keeps its own registry.

Gauges that describe the database (units by phase, open operations) or the broker (queue
depth) are computed when scraped, by collectors registered from the apps' `ready()`, so every
web process reports the same truth instead of each counting what it happened to see.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from http.server import ThreadingHTTPServer
from pathlib import Path

import redis
from django.conf import settings
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import REGISTRY, Collector

logger = logging.getLogger(__name__)
CONTENT_TYPE = CONTENT_TYPE_LATEST
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_TO_RUNNING = (0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600)

API_REQUEST_SECONDS = Histogram(
    "controlplane_api_request_duration_seconds",
    "API requests by route (URL pattern), method and status code.",
    ["route", "method", "status"],
    buckets=_SECONDS,
)
KUBE_REQUESTS = Counter(
    "controlplane_kube_requests_total",
    "Calls to the Kubernetes API by verb and outcome (ok, conflict, not_found, client_error, "
    "server_error, unreachable).",
    ["verb", "outcome"],
)
UNIT_TIME_TO_RUNNING = Histogram(
    "controlplane_unit_time_to_running_seconds",
    "Seconds from a unit's order to its first Running.",
    buckets=_TO_RUNNING,
)
INVENTORY_SYNC_SECONDS = Histogram(
    "controlplane_inventory_sync_duration_seconds",
    "Inventory mirror updates: beat's full sync (source=sync) or the observer's (observer).",
    ["source"],
    buckets=_SECONDS,
)
RECONCILE_SECONDS = Histogram(
    "controlplane_reconcile_duration_seconds",
    "A backstop reconcile: one page tick of beat's, or a full pass over every unit.",
    buckets=_SECONDS,
)
AUDIT_REFUSED = Counter(
    "controlplane_audit_refused_total",
    "Writes refused before acting (401, 403, 429): counted here, not stored in the audit log",
    ["source", "status"],
)
OBSERVER_EVENTS = Counter(
    "controlplane_observer_events_total", "Watch events the observer received, by kind.", ["kind"]
)
OBSERVER_LAG_SECONDS = Histogram(
    "controlplane_observer_lag_seconds",
    "Seconds from a watch event's arrival to its batch committed in the database.",
    buckets=_SECONDS,
)
OBSERVER_LEADING = Gauge(
    "controlplane_observer_leading",
    "1 while this observer holds the lead of the cluster's observation.",
    ["cluster"],
    multiprocess_mode="max",
)

USAGE_AUDIT_DIFFERENCES = Gauge(
    "controlplane_usage_audit_differences",
    "Units whose billed time differed from their held time by over a second at the last "
    "usage audit (beat's runtime.audit_usage, over the last day): 0 when the ledger is right.",
    multiprocess_mode="mostrecent",
)

_scrape_collectors: list[Callable[[], Iterable[Metric]]] = []


def _broker_queue() -> Iterable[Metric]:
    """Messages waiting in the Celery queue (a Redis list), read at scrape time."""
    depth = GaugeMetricFamily(
        "controlplane_task_queue_depth", "Tasks waiting in the broker's queue.", labels=["queue"]
    )
    try:
        client = redis.Redis.from_url(
            settings.CELERY_BROKER_URL, socket_connect_timeout=1, socket_timeout=1
        )
        depth.add_metric(["celery"], client.llen("celery"))
    except redis.RedisError:
        pass  # the broker being down shows in health; the gauge is then absent
    yield depth


def register_collector(collect: Callable[[], Iterable[Metric]]) -> None:
    """Add metrics computed at each scrape (from the database, the broker)."""
    _scrape_collectors.append(collect)


register_collector(_broker_queue)


class _ThisProcess(Collector):
    """This process's own samples (the default registry), for a registry of our own."""

    def collect(self) -> Iterable[Metric]:
        yield from REGISTRY.collect()


class _ScrapeTime(Collector):
    def collect(self) -> Iterable[Metric]:
        for collect in _scrape_collectors:
            try:
                families = list(collect())
            except Exception:  # the database down: its gauges are absent, /metrics still answers
                logger.warning("metrics collector %s failed", collect.__qualname__, exc_info=True)
                continue
            yield from families


def registry(*, with_scrape_time: bool) -> CollectorRegistry:
    """What one exposition shows: every process's samples (in multiprocess mode) or this
    process's, plus the scrape-time collectors when asked."""
    target = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(target)
    else:
        target.register(_ThisProcess())
    if with_scrape_time:
        target.register(_ScrapeTime())
    return target


def exposition(*, with_scrape_time: bool) -> bytes:
    return generate_latest(registry(with_scrape_time=with_scrape_time))


def serve(port: int, *, with_scrape_time: bool = False) -> ThreadingHTTPServer:
    """Serve /metrics on `port` from a daemon thread (the worker's and observer's endpoint)."""
    target = registry(with_scrape_time=with_scrape_time)
    handler = MetricsHandler.factory(target)
    server = ThreadingHTTPServer(("0.0.0.0", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def clear_multiprocess_directory() -> None:
    """Empty PROMETHEUS_MULTIPROC_DIR (when set) before a forking server starts its children:
    prometheus-client wants it empty at start, and a container restarted in the same pod
    finds the files of its previous run there."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return
    for path in Path(directory).glob("*.db"):
        path.unlink(missing_ok=True)


def mark_process_dead(pid: int) -> None:
    """A forked child exited: its live gauges no longer count (gunicorn's child_exit)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid)
