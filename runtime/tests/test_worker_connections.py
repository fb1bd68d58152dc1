"""The worker keeps its database connections from one task to the next, as gunicorn keeps
them from one request to the next (DB_CONN_MAX_AGE): a create does not pay for a new
PostgreSQL backend. Celery's Django fix-up would close them around every task."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from conftest import start_worker, stop_worker
from runtime.models import Operation
from runtime.tests.helpers import remove_namespace_objects
from tests.endpoints import client_for

pytestmark = pytest.mark.django_db(transaction=True)

CREATES = 8
WORKER_THREADS = 4  # conftest.start_worker: --pool threads --concurrency 4
APP_NAME = "test-worker-connections"  # libpq's PGAPPNAME names this worker's backends


@pytest.fixture
def worker(session_worker_paused, cluster):
    """A worker of this test's own, so that only its connections carry APP_NAME, with a
    connection age longer than the test so that none is replaced by age while it runs."""
    process = start_worker("connections", PGAPPNAME=APP_NAME, DB_CONN_MAX_AGE="600")
    yield process
    stop_worker(process)


def worker_backends() -> set[int]:
    """The PostgreSQL backends the test's worker holds open."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s",
            [APP_NAME],
        )
        return {pid for (pid,) in cursor.fetchall()}


def test_tasks_reuse_the_workers_database_connections(worker, tenant):
    PackageFactory(article=True)
    tenant.quota_cpu, tenant.quota_memory, tenant.quota_claims = "1000", "1Ti", 100
    tenant.save()
    client = client_for(tenant)
    after_each: list[set[int]] = []
    try:
        for index in range(CREATES):
            name = f"reuse-{index}"
            body = {"operationID": name, "name": name, "packageID": ARTICLE_PACKAGE_ID}
            response = client.post("/api/v1/gpu-units", {**body, "image": "busybox"}, format="json")
            assert response.status_code == 201, response.content
            deadline = time.monotonic() + 30
            while Operation.objects.get(operation_id=name).status != "succeeded":
                assert time.monotonic() < deadline, f"{name} was not provisioned"
                time.sleep(0.02)
            after_each.append(worker_backends())
    finally:
        remove_namespace_objects(tenant.namespace)
    # Each task's connection is still open once the task is done (none would be, were each
    # closed as its task ends), and eight creates use at most one per worker thread, not one
    # per task. The worker's main thread holds one too: it reads the cluster registry at
    # start (controlplane/celery.py). Tasks other tests left on the webhooks queue, which this
    # worker also takes, can keep every pool thread busy at once.
    assert all(after_each), after_each
    assert len(set().union(*after_each)) <= WORKER_THREADS + 1, after_each
