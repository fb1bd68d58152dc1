"""Broker down, database connections dropped, cluster failing or unreachable: accepted work is
never lost and finishes once the fault is gone."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connection

from controlplane import kube
from devstack.services import free_port
from runtime import orders
from runtime.control import reconcile
from runtime.models import GPUUnit, Operation
from runtime.tests.helpers import broker_at, wait_for_phase
from tenancy.tests.factories import key_for
from tests.reliability.conftest import order_units, post_json, wait_until_settled

pytestmark = [
    pytest.mark.long,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker"),
]


def create_body(index: int, package: str) -> dict:
    return {
        "operationID": f"op-{index}",
        "name": f"unit-{index}",
        "packageID": package,
        "image": "busybox",
    }


def test_broker_down_still_accepts_and_nothing_is_lost(customer, h100, settings, record):
    tenant = customer.tenant
    timings = []
    with broker_at(f"redis://127.0.0.1:{free_port()}/0"):
        health = customer.get("/api/v1/health").json()["data"]["checks"]["broker"]
        for index in range(3):
            started = time.monotonic()
            response = customer.post(
                "/api/v1/gpu-units", create_body(index, h100.id), format="json"
            )
            timings.append(round(time.monotonic() - started, 3))
            assert response.status_code == 201
    assert health["ok"] is False
    pending = Operation.objects.filter(tenant=tenant, status="pending").count()
    assert pending == 3  # committed, waiting for the broker
    settings.OPERATION_STALE_SECONDS = 0  # Redis is back: the next sweep re-sends them
    phases = wait_until_settled(tenant, {"Running"}, sweep=True)
    assert phases == {"Running": 3}
    record(
        requests=3,
        accepted=3,
        slowest_create_s=max(timings),
        pending_while_down=pending,
        running_after=phases["Running"],
        lost=0,
    )


def test_database_connections_dropped_during_traffic(live_server, customer, h100, settings, record):
    """A thread keeps killing every other backend while orders arrive and tasks run."""
    tenant = customer.tenant
    key = key_for(tenant)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid(), current_database()")
        own_pid, database = cursor.fetchone()
    params = connection.get_connection_params()
    stop, kills = threading.Event(), []

    def killer() -> None:
        with psycopg.connect(**params, autocommit=True) as admin:
            while not stop.is_set():
                killed = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid NOT IN (pg_backend_pid(), %s)",
                    [database, own_pid],
                ).fetchone()[0]
                kills.append(killed)
                time.sleep(0.2)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    statuses, attempts = {}, 0
    url = f"{live_server.url}/api/v1/gpu-units"
    try:
        for index in range(8):
            for _retry in range(10):  # a client retries what failed; the operationID makes it safe
                attempts += 1
                status, _body = post_json(url, key, create_body(index, h100.id))
                if status in (200, 201):
                    statuses[index] = status
                    break
                time.sleep(0.1)
        # A request's connection lives only while it runs: on a fast machine all eight can
        # fall between two kills. Replays (harmless, by operationID) go on until one is hit.
        deadline = time.monotonic() + 20
        while not sum(kills) and time.monotonic() < deadline:
            attempts += 1
            post_json(url, key, create_body(attempts % 8, h100.id))
    finally:
        time.sleep(1.0)  # let tasks run into the killer too
        stop.set()
        thread.join()
    assert len(statuses) == 8
    assert sum(kills) > 0, "no connection was dropped: the scenario did not happen"
    settings.OPERATION_STALE_SECONDS = 2
    phases = wait_until_settled(tenant, {"Running"}, sweep=True)
    assert phases == {"Running": 8}
    assert GPUUnit.objects.filter(tenant=tenant).count() == 8
    assert len(kube.list_objects(kube.POD, namespace=tenant.namespace)) == 8
    record(
        orders=8,
        http_attempts=attempts,
        http_attempts_beyond_the_eight_orders=attempts - 8,
        backends_killed=sum(kills),
        accepted=len(statuses),
        running_after=phases["Running"],
        duplicates=0,
    )


def test_thirty_percent_of_cluster_calls_fail_or_time_out(
    customer, h100, cluster, settings, record
):
    tenant = customer.tenant
    settings.KUBE_REQUEST_TIMEOUT = 2  # the in-process reconciler's calls, like the worker's
    settings.OPERATION_STALE_SECONDS = 10
    cluster.requests.clear()
    cluster.faults.set(error_rate=0.15, status=500, timeout_rate=0.15)
    order_units(tenant, h100.id, 5)
    phases = wait_until_settled(tenant, {"Running"}, sweep=True, timeout=240)
    entries = cluster.requests.entries()
    cluster.faults.clear()
    failed = sum(1 for e in entries if e.code >= 500)
    hung = sum(1 for e in entries if e.code == 0)
    assert phases == {"Running": 5}
    assert failed, "no call failed: the fault was not exercised"
    assert hung, "no call timed out: the fault was not exercised"
    assert len(kube.list_objects(kube.POD, namespace=tenant.namespace)) == 5
    record(
        units=5,
        cluster_calls=len(entries),
        failed_500=failed,
        timed_out=hung,
        running_after=phases["Running"],
        duplicates=0,
    )


def test_unreachable_cluster_keeps_status_and_resumes(customer, h100, cluster, settings, record):
    tenant = customer.tenant
    settings.KUBE_REQUEST_TIMEOUT = 2
    first = orders.create_unit(
        tenant=tenant, operation_id="op-a", name="a", package_id=h100.id, image="busybox"
    ).unit
    first = wait_for_phase(first, "Running")
    known = (first.phase, first.dra)
    cluster.faults.unreachable = True
    try:
        response = customer.post("/api/v1/gpu-units", create_body(1, h100.id), format="json")
        assert response.status_code == 201  # accepted without the cluster
        assert reconcile.reconcile_units().skipped
        health = customer.get("/api/v1/health").json()["data"]
        time.sleep(2)  # provisioning keeps failing and retrying meanwhile
        first.refresh_from_db()
        kept = (first.phase, first.dra) == known
    finally:
        cluster.faults.unreachable = False
    assert kept
    assert health["status"] == "degraded"
    assert health["checks"]["cluster"]["ok"] is False
    settings.OPERATION_STALE_SECONDS = 2
    phases = wait_until_settled(tenant, {"Running"}, sweep=True)
    assert phases == {"Running": 2}
    record(
        units=2,
        accepted_while_unreachable=1,
        status_kept=kept,
        health_cluster_ok=health["checks"]["cluster"]["ok"],
        running_after=phases["Running"],
    )
