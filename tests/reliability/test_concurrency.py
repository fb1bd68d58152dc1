"""Concurrent creates through a real threaded HTTP server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from controlplane import kube
from runtime import lifecycle
from runtime.models import GPUUnit, Operation, UnitPhase
from tenancy.tests.factories import key_for
from tests.reliability.conftest import order_units, post_json, wait_until_settled

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def test_fifty_different_creates_against_a_quota_for_ten(live_server, customer, h100, record):
    tenant = customer.tenant
    tenant.quota_cpu = "100"  # ten units of 10 CPU
    tenant.save()
    key = key_for(tenant)
    url = f"{live_server.url}/api/v1/gpu-units"
    payloads = [
        {"operationID": f"op-{i}", "name": f"unit-{i}", "packageID": h100.id, "image": "busybox"}
        for i in range(50)
    ]
    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(lambda p: post_json(url, key, p), payloads))
    statuses = [status for status, _ in results]
    rejected = [body["error"] for status, body in results if status == 409]
    assert sorted(set(statuses)) == [201, 409], statuses  # 0 would be a refused connection
    assert statuses.count(201) == 10
    assert len(rejected) == 40
    assert {error["code"] for error in rejected} == {"quota_exceeded"}
    assert {error["details"]["limit"] for error in rejected} == {"requests.cpu"}
    assert all("it needs 10 CPU" in error["message"] for error in rejected)
    assert GPUUnit.objects.filter(tenant=tenant).count() == 10
    assert Operation.objects.filter(tenant=tenant).count() == 10

    phases = wait_until_settled(tenant, {"Running", "Pending"})
    claims = kube.list_objects(kube.RESOURCECLAIM, namespace=tenant.namespace)
    assert len(claims) == 10
    record(
        requests=50,
        accepted=statuses.count(201),
        rejected_quota_exceeded=len(rejected),
        units=10,
        claims_in_cluster=len(claims),
        phases=phases,
    )


def test_fifty_identical_concurrent_creates_make_one_unit(live_server, customer, h100, record):
    tenant = customer.tenant
    key = key_for(tenant)
    payload = {"operationID": "burst-1", "name": "burst", "packageID": h100.id, "image": "busybox"}
    url = f"{live_server.url}/api/v1/gpu-units"
    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(lambda _: post_json(url, key, payload), range(50)))
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] * 49 + [201]
    assert len({body["data"]["createdAt"] for _, body in results}) == 1
    assert GPUUnit.objects.filter(tenant=tenant).count() == 1

    wait_until_settled(tenant, {"Running"})
    selector = "runtime.lokiwager.io/unit=burst"
    objects = {
        kind.kind: len(kube.list_objects(kind, namespace=tenant.namespace, label_selector=selector))
        for kind in (kube.GPUUNIT, kube.RESOURCECLAIM, kube.POD)
    }
    assert objects == {"GPUUnit": 1, "ResourceClaim": 1, "Pod": 1}
    record(
        requests=50,
        created=statuses.count(201),
        replayed=statuses.count(200),
        units=1,
        objects_in_cluster=objects,
    )


def test_thirty_concurrent_creates_of_one_name_never_deadlock(live_server, customer, h100, record):
    """Thirty orders for the same name under thirty operationIDs: one unit, 29 name
    conflicts, and no 503 (a deadlock on the tenant row answered 503 three times of thirty
    before the create path had one lock order: runtime/orders.py)."""
    tenant = customer.tenant
    key = key_for(tenant)
    url = f"{live_server.url}/api/v1/gpu-units"
    payloads = [
        {"operationID": f"same-{i}", "name": "same", "packageID": h100.id, "image": "busybox"}
        for i in range(30)
    ]
    with ThreadPoolExecutor(max_workers=30) as pool:
        results = list(pool.map(lambda p: post_json(url, key, p), payloads))
    statuses = sorted(status for status, _ in results)
    assert statuses == [201] + [409] * 29, statuses
    assert {body["error"]["code"] for status, body in results if status == 409} == {"name_conflict"}
    assert GPUUnit.objects.filter(tenant=tenant).count() == 1
    assert Operation.objects.filter(tenant=tenant).count() == 1
    wait_until_settled(tenant, {"Running"})
    record(requests=30, created=1, name_conflicts=statuses.count(409))


def test_quota_freed_by_deletions_goes_to_exactly_that_many_concurrent_orders(
    live_server, customer, h100, record
):
    tenant = customer.tenant
    tenant.quota_cpu = "100"  # ten units of 10 CPU
    tenant.save()
    order_units(tenant, h100.id, 10)
    wait_until_settled(tenant, {"Running", "Pending"})
    for index in range(4):
        lifecycle.request_unit_deletion(tenant=tenant, name=f"unit-{index}")
    wait_until_settled(tenant, {"Running", "Pending", "Terminated"})
    tenant.refresh_from_db()
    assert (tenant.used_cpu_millicores, tenant.used_claims) == (60_000, 6)

    key = key_for(tenant)
    url = f"{live_server.url}/api/v1/gpu-units"
    payloads = [
        {"operationID": f"new-{i}", "name": f"new-{i}", "packageID": h100.id, "image": "busybox"}
        for i in range(20)
    ]
    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = [status for status, _ in pool.map(lambda p: post_json(url, key, p), payloads)]
    assert statuses.count(201) == 4
    assert statuses.count(409) == 16
    live = GPUUnit.objects.filter(tenant=tenant, phase__in=UnitPhase.LIVE).count()
    tenant.refresh_from_db()
    assert (tenant.used_cpu_millicores, tenant.used_claims, live) == (100_000, 10, 10)
    assert lifecycle.recount_usage() == []  # the counters agree with the units
    # The four new orders are provisioned before the test ends: a worker still writing them
    # while the test database is flushed deadlocks with the flush's TRUNCATE.
    wait_until_settled(tenant, {"Running", "Pending", "Terminated"})
    record(
        ordered_then_deleted=4,
        concurrent_requests=20,
        accepted=statuses.count(201),
        rejected=statuses.count(409),
        used_claims=tenant.used_claims,
    )
