"""The worker keeps its database connections from one task to the next, as gunicorn keeps
them from one request to the next (DB_CONN_MAX_AGE): a create does not pay for a new
PostgreSQL backend. Celery's Django fix-up would close them around every task."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from runtime.models import Operation
from runtime.tests.helpers import remove_namespace_objects
from tests.endpoints import client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]

CREATES = 8
WORKER_THREADS = 4  # conftest.start_worker: --pool threads --concurrency 4


def other_backends() -> set[int]:
    """The client backends connected to the test database, but this test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return {pid for (pid,) in cursor.fetchall()}


def test_tasks_reuse_the_workers_database_connections(tenant):
    PackageFactory(article=True)
    tenant.quota_cpu, tenant.quota_memory, tenant.quota_claims = "1000", "1Ti", 100
    tenant.save()
    client = client_for(tenant)
    seen: set[int] = set()
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
            seen |= other_backends()
    finally:
        remove_namespace_objects(tenant.namespace)
    # The worker's connections outlive its tasks: one per worker thread at most, not one
    # per task (and none seen at all when each is closed as its task ends).
    assert seen, "no connection of the worker outlived its task"
    assert len(seen) <= WORKER_THREADS, seen
