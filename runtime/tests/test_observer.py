"""The observer against the simulated cluster, a real Celery worker and the database: units
reach Running and Terminated, and the inventory follows, with no reconcile or sync call; what
one event costs does not grow with the units in the database; one replica of several leads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from billing.models import Meter
from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from inventory.models import Claim, Cluster, InventorySnapshot
from runtime import lifecycle
from runtime.control.observer import Observer
from runtime.models import GPUUnit, UnitPhase
from runtime.tests.factories import UnitFactory
from runtime.tests.helpers import remove_namespace_objects
from tests.endpoints import client_for, recording

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


@pytest.fixture(autouse=True)
def _free_devices_after(tenant):
    yield
    remove_namespace_objects(tenant.namespace)


def running(observer: Observer) -> threading.Thread:
    thread = threading.Thread(target=_run, args=(observer,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not observer.synced():
        assert time.monotonic() < deadline, "the observer did not list the cluster"
        time.sleep(0.02)
    return thread


def _run(observer: Observer) -> None:
    try:
        observer.run()
    finally:
        connection.close()  # this thread's own database connection


@pytest.fixture
def observer() -> Iterator[Observer]:
    instance = Observer()
    thread = running(instance)
    yield instance
    instance.stop()
    thread.join(10)


def wait_for(predicate, timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.02)


def phase_of(name: str) -> str:
    return GPUUnit.objects.filter(name=name).order_by("-id").values_list("phase", flat=True)[0]


def test_a_unit_reaches_running_and_terminated_by_events_alone(observer, tenant):
    # No beat runs in the test session: only the observer moves the unit.
    PackageFactory(article=True)
    client = client_for(tenant)
    body = {"operationID": "o-1", "name": "watched", "packageID": ARTICLE_PACKAGE_ID}
    response = client.post("/api/v1/gpu-units", {**body, "image": "busybox"}, format="json")
    assert response.status_code == 201
    wait_for(lambda: phase_of("watched") == UnitPhase.RUNNING, what="Running")
    unit = GPUUnit.objects.get(name="watched")
    assert unit.dra["allocated"] is True
    assert unit.last_sync_at is not None
    # Billing is recorded from events alone too, after what it follows: the timeline reads
    # as it happened (the pod may run before the worker records Provisioned).
    wait_for(lambda: unit.events.filter(reason="UsageStarted").exists(), what="UsageStarted")
    reasons = list(unit.events.values_list("reason", flat=True))
    assert {"Provisioned", "Allocated", "Running"} <= set(reasons)
    assert len(reasons) == len(set(reasons)), reasons  # no entry twice
    order = [reasons.index(r) for r in ("Provisioned", "Allocated", "UsageStarted")]
    assert order == sorted(order), reasons
    # The inventory mirror followed the allocation with no sync.
    wait_for(
        lambda: Claim.objects.filter(name=unit.claim_name, allocated=True).exists(),
        what="the mirror to show the claim allocated",
    )
    as_of = InventorySnapshot.objects.get().as_of
    assert client.delete("/api/v1/gpu-units/watched").status_code == 202
    wait_for(lambda: phase_of("watched") == UnitPhase.TERMINATED, what="Terminated")
    wait_for(lambda: not Claim.objects.filter(name=unit.claim_name).exists(), what="claim gone")
    assert InventorySnapshot.objects.get().as_of > as_of
    assert observer.stats.units_reconciled > 0


def test_an_event_costs_the_same_however_many_units_and_clusters_the_database_holds(
    tenant, cluster
):
    PackageFactory(article=True)
    client = client_for(tenant)
    body = {"operationID": "o-1", "name": "costed", "packageID": ARTICLE_PACKAGE_ID}
    observer = Observer()
    thread = running(observer)
    try:
        client.post("/api/v1/gpu-units", {**body, "image": "busybox"}, format="json")
        wait_for(lambda: phase_of("costed") == UnitPhase.RUNNING, what="Running")
        # No reconcile ran: the observer's reconcile that saw its pod run opened its meter.
        uid = GPUUnit.objects.get(name="costed").uid
        wait_for(lambda: Meter.objects.filter(unit_uid=uid).exists(), what="the meter")
    finally:
        observer.stop()
        thread.join(10)
    # Measured on this thread alone: an observer's informers without its loop.
    observer = Observer()
    observer.start_informers()
    wait_for(observer.synced, what="the informers to list the cluster")
    unit = GPUUnit.objects.get(name="costed")
    key = (unit.namespace, unit.name)

    def one_event() -> tuple[int, int]:
        # As after an event about the unit: one batch, the unit's row changed meanwhile, so
        # the observation writes it back; its pod still runs, so its meter is marked seen.
        lifecycle.transition_unit(
            GPUUnit.objects.get(pk=unit.pk), to=UnitPhase.PENDING, reason="Probe"
        )
        cluster.requests.clear()
        with recording() as log:
            observer._reconcile_batch({key: time.monotonic()})
        assert phase_of("costed") == UnitPhase.RUNNING
        return len(log.statements), len(cluster.requests.entries())

    try:
        few = one_event()
        UnitFactory.create_batch(2_000, tenant=tenant, phase=UnitPhase.RUNNING)
        many = one_event()
        # A second cluster enabled, with units of its own: this cluster's event costs the same.
        Cluster.objects.create(name="west-1", region="eu-west")
        UnitFactory.create_batch(500, tenant=tenant, phase=UnitPhase.RUNNING, cluster="west-1")
        two_clusters = one_event()
    finally:
        observer._stop_informers()
    assert few == many == two_clusters
    statements, calls = few
    # The GPUUnit status already says Running (the informer holds it): nothing to patch.
    assert calls == 0
    # The units, the transition, its timeline entry (a phase the unit was not in: no need
    # to read the latest) and the tenant's webhooks that want it (one indexed read), the sync
    # stamp, and the usage meter: the open ones, seen now.
    assert statements == 7


def test_one_replica_leads_and_another_takes_over(tenant):
    first, second = Observer(), Observer()
    threads = [running(first)]
    try:
        threads.append(threading.Thread(target=_run, args=(second,), daemon=True))
        threads[-1].start()
        time.sleep(1.0)
        assert first.leading.is_set()
        assert not second.leading.is_set()
        first.stop()
        threads[0].join(10)
        wait_for(second.leading.is_set, timeout=15, what="the second replica to lead")
        wait_for(second.synced, what="the new leader to list the cluster")
    finally:
        first.stop()
        second.stop()
        for thread in threads:
            thread.join(10)


def test_a_lost_lead_connection_steps_down_and_takes_the_lead_again(observer, tenant):
    """The lead is a session lock: when the database drops that session, the observer stops
    acting, takes the lead again (no other replica wants it), lists afresh and goes on."""
    first_informers = dict(observer.informers)
    lead_pid = observer.lead.connection.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [lead_pid])
    wait_for(
        lambda: (
            observer.lead.connection is None
            or observer.lead.connection.info.backend_pid != lead_pid
        ),
        what="the observer to notice its lead connection is gone",
    )
    wait_for(observer.leading.is_set, what="the lead taken again")
    # Listed afresh: new informers (the old ones stay synced until they are stopped).
    wait_for(
        lambda: (
            observer.synced()
            and all(observer.informers.get(k) is not first_informers[k] for k in first_informers)
        ),
        what="new informers listed",
    )
    assert observer.lead.connection.info.backend_pid != lead_pid
    PackageFactory(article=True)
    body = {"operationID": "o-2", "name": "after", "packageID": ARTICLE_PACKAGE_ID}
    client_for(tenant).post("/api/v1/gpu-units", {**body, "image": "busybox"}, format="json")
    wait_for(lambda: phase_of("after") == UnitPhase.RUNNING, what="Running after the new lead")
