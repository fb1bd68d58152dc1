"""The tenant usage counters behind the quota check: orders charge them, terminations give
them back, recount_usage repairs them, and deletions by uid never touch a newer unit."""

from __future__ import annotations

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from runtime import lifecycle
from runtime.models import GPUUnit, UnitPhase
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/gpu-units"


@pytest.fixture(autouse=True)
def package(db):
    return PackageFactory(article=True)


def body(**overrides) -> dict:
    return {
        "operationID": "unit-demo-001",
        "name": "demo-instance",
        "packageID": ARTICLE_PACKAGE_ID,
        "image": "python:3.12",
        **overrides,
    }


def test_orders_charge_and_termination_releases_the_tenant_usage(tenant):
    client = client_for(tenant)
    client.post(URL, body(), format="json")
    client.post(URL, body(operationID="b", name="b"), format="json")
    client.post(URL, body(), format="json")  # a replay charges nothing
    tenant.refresh_from_db()
    # The package: 10 CPUs, 40Gi.
    assert (tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims) == (
        20_000,
        80 * 2**30,
        2,
    )
    unit = lifecycle.request_unit_deletion(tenant=tenant, name="b")
    assert lifecycle.mark_unit_terminated(unit)
    assert not lifecycle.mark_unit_terminated(unit)
    tenant.refresh_from_db()
    assert (tenant.used_cpu_millicores, tenant.used_claims) == (10_000, 1)
    assert lifecycle.recount_usage() == []


def test_deletion_by_uid_never_touches_a_newer_unit_of_the_same_name(tenant):
    client = client_for(tenant)
    client.post(URL, body(), format="json")
    old = lifecycle.request_unit_deletion(tenant=tenant, name="demo-instance")
    lifecycle.mark_unit_terminated(old)
    client.post(URL, body(operationID="again"), format="json")
    again = lifecycle.request_unit_deletion(tenant=tenant, name="demo-instance", uid=old.uid)
    assert (again.pk, again.phase) == (old.pk, UnitPhase.TERMINATED)
    newer = GPUUnit.objects.get(tenant=tenant, operation_id="again")
    assert newer.phase == UnitPhase.ACCEPTED


def test_recount_repairs_counters_that_disagree_with_the_units(tenant):
    client_for(tenant).post(URL, body(), format="json")
    other = TenantFactory()
    GPUUnit.objects.update(phase=UnitPhase.TERMINATED)  # behind the order path's back
    assert lifecycle.recount_usage() == [tenant.slug]
    tenant.refresh_from_db()
    assert (tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims) == (
        0,
        0,
        0,
    )
    other.refresh_from_db()
    assert other.used_claims == 0
    assert lifecycle.recount_usage() == []
