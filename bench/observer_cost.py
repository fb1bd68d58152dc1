"""What observing costs as the fleet grows: at 10 and 2,000 units (each with its GPUUnit, claim
and pod as provisioning makes them, allocated by the scheduler and running, on a development
cluster of 250 nodes x 8 H100: the real API server, scheduler and controller-manager, KWOK
nodes; the cluster grows from the first size to the second), the SQL statements
and cluster calls of one observed change, the duration of the full reconcile pass, of the
slowest tick of beat's paged backstop over one cycle (RECONCILE_PAGE_SIZE units a tick) and how
many ticks the cycle takes, and the resident memory of the web, worker and observer processes.
Prints one JSON line.

One observed change: the unit's row and its GPUUnit's status are put behind its objects (Pending
while its pod runs), as just before the event that its pod runs, and the observer's batch brings
them up: the units it loads, the transition, the timeline entry, the sync stamp, and the
GPUUnit status patch."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import psutil

from bench import harness

# 2,000 running units, not 10,000: on the 2-core machine the development cluster makes and
# places about 5 pods a second, so 10,000 took 40 minutes to seed and then its API server renewed
# 1,250 nodes' Leases too late to keep them Ready (issue 44 takes the 10,000 figure on).
SIZES = harness.sized((10, 2_000), (10, 40))
NODES, GPUS_PER_NODE = harness.sized((250, 8), (6, 8))  # 2,000 devices (small: 48)
UNIT_NAMESPACE = UNIT_TENANT = "bench-units"
# Creating 10,000 units' objects and the scheduler placing their pods takes minutes.
SEED_TIMEOUT_SECONDS = 2400.0


def _seed_rows(tenant: Any, package: Any, gpuunits: list[dict]) -> None:
    """The database rows of units whose objects the cluster already has (as provisioning
    would have recorded them), in one bulk insert."""
    from django.conf import settings

    from runtime.models import GPUUnit, UnitPhase

    rows = [
        GPUUnit(
            tenant=tenant,
            name=gpuunit["metadata"]["name"],
            namespace=UNIT_NAMESPACE,
            cluster=settings.CLUSTER_NAME,
            operation_id=gpuunit["metadata"]["name"],  # as harness.unit_contract names it
            image=harness.IMAGE,
            phase=UnitPhase.PROVISIONING,
            unit_k8s_uid=gpuunit["metadata"]["uid"],
            # Provisioning brought the objects to the unit's generation (else the
            # reconcile leaves the unit to a rollout that never comes).
            observed_generation=1,
            **GPUUnit.contract_fields(package, name=gpuunit["metadata"]["name"]),
        )
        for gpuunit in gpuunits
    ]
    GPUUnit.objects.bulk_create(rows, batch_size=2_000)


def _grow(cluster: harness.DevCluster, tenant: Any, package: Any, units: int) -> list[dict]:
    """Units `unit-<n>` up to `units` in the cluster, their pods placed and Running; returns
    every GPUUnit."""
    from controlplane import kube

    have = len(kube.list_all(kube.GPUUNIT)[0])
    contracts = [
        harness.unit_contract(package, tenant, f"unit-{n}", UNIT_NAMESPACE)
        for n in range(have, units)
    ]
    running = harness.PodsRunning(cluster, UNIT_NAMESPACE).start()
    harness.create_units(cluster, contracts)
    running.wait(units, timeout=SEED_TIMEOUT_SECONDS)
    gpuunits, _version = kube.list_all(kube.GPUUNIT)
    return gpuunits


def _kube_calls() -> float:
    from prometheus_client.parser import text_string_to_metric_families

    from controlplane import metrics

    text = metrics.exposition(with_scrape_time=False).decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "controlplane_kube_requests"
        for sample in family.samples
        if sample.name.endswith("_total")
    )


@contextlib.contextmanager
def _observer_informers() -> Iterator:
    """An observer's informers without its loop: its batches run on this thread alone."""
    from runtime.control.observer import Observer

    observer = Observer()
    observer.start_informers()
    deadline = time.monotonic() + 300
    while not observer.synced():
        if time.monotonic() > deadline:
            raise RuntimeError("the observer did not list the cluster")
        time.sleep(0.05)
    try:
        yield observer
    finally:
        observer._stop_informers()


def _one_event(observer, unit) -> tuple[int, float]:
    from django.db import connection

    from controlplane import kube
    from runtime import lifecycle
    from runtime.models import GPUUnit, UnitPhase

    # Before the change: the row (through a transition, so its usage meter closes as it would)
    # and the GPUUnit's status both say Pending.
    lifecycle.transition_unit(GPUUnit.objects.get(pk=unit.pk), to=UnitPhase.PENDING, reason="Probe")
    informer = observer.informers[kube.GPUUNIT]
    key = (unit.namespace, unit.name)
    with informer._lock:
        cached = informer.objects[key]
        informer.objects[key] = {**cached, "status": {**cached["status"], "phase": "Pending"}}
    statements: list[str] = []

    def count(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    before = _kube_calls()
    with connection.execute_wrapper(count):
        observer._reconcile_batch({key: time.monotonic()})
    calls = _kube_calls() - before
    if GPUUnit.objects.get(pk=unit.pk).phase != UnitPhase.RUNNING:
        raise RuntimeError("the batch did not bring the unit back to Running")
    prefixes = ("SAVEPOINT", "RELEASE SAVEPOINT")
    return sum(1 for sql in statements if not sql.upper().startswith(prefixes)), calls


def _backstop_cycle() -> tuple[float, int]:
    """One cycle of beat's paged backstop, from the start, on a fleet in step: the slowest
    tick's duration and how many ticks it takes to visit every unit."""
    from django.conf import settings
    from django.core.cache import cache

    from runtime.control import reconcile

    cache.delete(reconcile.page_cursor_key(settings.CLUSTER_NAME))
    slowest, ticks = 0.0, 0
    while True:
        started = time.perf_counter()
        tick = reconcile.reconcile_page()
        slowest = max(slowest, time.perf_counter() - started)
        ticks += 1
        if tick.changed or tick.skipped:
            raise RuntimeError(f"a tick of a fleet in step changed or skipped: {tick}")
        if not cache.get(reconcile.page_cursor_key(settings.CLUSTER_NAME)):
            return slowest, ticks


def _rss_mb(process: psutil.Process) -> float:
    return round(process.memory_info().rss / 2**20, 1)


def measure(cluster: harness.DevCluster, tenant: Any, package: Any, units: int) -> dict:
    from runtime.control import reconcile
    from runtime.models import GPUUnit

    GPUUnit.objects.all().delete()
    _seed_rows(tenant, package, _grow(cluster, tenant, package, units))
    reconcile.reconcile_units()  # Provisioning -> Running, statuses patched: steady after
    started = time.perf_counter()
    steady = reconcile.reconcile_units()
    backstop_s = time.perf_counter() - started
    if steady.changed:
        raise RuntimeError(f"the second reconcile still changed units: {steady}")
    tick_s, cycle_ticks = _backstop_cycle()
    unit = GPUUnit.objects.order_by("id").first()
    with _observer_informers() as observer:
        one = [_one_event(observer, unit) for _ in range(3)]
    statements, calls = one[-1]
    with (
        harness.gunicorn() as port,
        harness.celery("worker", "--pool", "prefork", "--concurrency", "2") as worker,
        harness.observer() as observer_process,
    ):
        harness.wait_for_worker()
        key = harness.api_key(tenant)
        list_request = harness.json_request("GET", "/api/v1/gpu-units?limit=100", None, key)
        harness.run_load(port, lambda _i, _w: list_request, concurrency=2, total=50).check(200)
        web = psutil.Process(harness.gunicorn_pid(port))
        web_mb = max(_rss_mb(child) for child in web.children())
        worker_mb = max(
            [_rss_mb(psutil.Process(worker.pid))]
            + [_rss_mb(c) for c in psutil.Process(worker.pid).children()]
        )
        observer_mb = _rss_mb(psutil.Process(observer_process.pid))
    return {
        f"u{units}_event_statements": statements,
        f"u{units}_event_cluster_calls": calls,
        f"u{units}_backstop_reconcile_s": round(backstop_s, 4),
        f"u{units}_backstop_tick_s": round(tick_s, 4),
        f"u{units}_backstop_cycle_ticks": cycle_ticks,
        f"u{units}_web_rss_mb": web_mb,
        f"u{units}_worker_rss_mb": worker_mb,
        f"u{units}_observer_rss_mb": observer_mb,
    }


def main() -> None:
    harness.setup("observer_cost", KUBE_REQUEST_TIMEOUT="30")
    package = harness.make_package()
    from django.conf import settings

    from runtime.control.provisioning import install_crd

    figures: dict = {
        "bench": "observer_cost",
        "sizes": list(SIZES),
        "devices": NODES * GPUS_PER_NODE,
        "reconcile_page_size": settings.RECONCILE_PAGE_SIZE,
    }
    tenant = harness.tenant_with_namespace(UNIT_TENANT, UNIT_NAMESPACE)
    with harness.dev_cluster("default", nodes=NODES, gpus_per_node=GPUS_PER_NODE) as cluster:
        harness.use_cluster(cluster.kubeconfig)
        install_crd()
        harness.tenant_namespace(cluster, tenant)
        for units in SIZES:
            harness.log(f"observer_cost: {units} units")
            figures.update(measure(cluster, tenant, package, units))
    small, large = SIZES
    figures["event_cost_flat"] = (
        figures[f"u{small}_event_statements"] == figures[f"u{large}_event_statements"]
        and figures[f"u{small}_event_cluster_calls"] == figures[f"u{large}_event_cluster_calls"]
    )
    figures["backstop_ratio"] = harness.ratio(
        figures[f"u{large}_backstop_reconcile_s"], figures[f"u{small}_backstop_reconcile_s"]
    )
    harness.emit(figures)


if __name__ == "__main__":
    main()
