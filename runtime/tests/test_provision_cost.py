"""What carrying out one create costs the worker: statements and cluster calls, the same with
few or many units in the database (a burst's throughput is bounded by these round trips)."""

from __future__ import annotations

import pytest

from catalog.tests.factories import PackageFactory
from controlplane import kube
from runtime import lifecycle
from runtime.control.provisioning import ensure_tenant_namespace, provision_unit
from runtime.models import GPUUnit, Operation, UnitPhase
from runtime.tests.factories import UnitFactory
from runtime.tests.helpers import remove_namespace_objects
from tests.endpoints import recording

pytestmark = pytest.mark.django_db(transaction=True)

GPUUNIT_RESOURCE = f"{kube.GPUUNIT.plural}.{kube.GPUUNIT.group}"


@pytest.fixture(autouse=True)
def _package_and_cleanup(tenant):
    PackageFactory(article=True)
    ensure_tenant_namespace(tenant)
    yield
    remove_namespace_objects(tenant.namespace)


def provision(tenant, name: str, cluster) -> tuple[list[str], list[str]]:
    unit = UnitFactory(tenant=tenant, name=name, image="busybox")
    operation = Operation.objects.create(
        tenant=tenant, operation_id=f"op-{name}", kind="create", request_hash="x" * 64, unit=unit
    )
    lifecycle.recount_usage()
    cluster.requests.clear()
    with recording() as log:
        provision_unit(operation_pk=operation.pk)
    unit.refresh_from_db()
    assert unit.phase == UnitPhase.PROVISIONING
    assert unit.events.filter(reason="Provisioned").exists()
    assert Operation.objects.get(pk=operation.pk).status == "succeeded"
    calls = [f"{e.verb} {e.resource}" for e in cluster.requests.entries()]
    return log.statements, calls


def test_a_create_costs_the_same_however_many_units_the_database_holds(tenant, cluster):
    provision(tenant, "warm", cluster)  # this process has now seen the tenant's namespace
    few = provision(tenant, "few", cluster)
    UnitFactory.create_batch(2_000, tenant=tenant, phase=UnitPhase.RUNNING)
    many = provision(tenant, "many", cluster)
    assert [len(statements) for statements, _ in (few, many)] == [10, 10]
    # The operation's lock (no other worker carries it out meanwhile), released at the end;
    # claim the operation (compare-and-set, then read it with its unit and tenant); the unit
    # to Provisioning, its timeline entry and the tenant's webhooks that want the change (one
    # indexed read: none here); then, in one transaction, the UIDs of its objects
    # (compare-and-set against a deletion), the Provisioned entry and the operation closed.
    assert "pg_try_advisory_lock" in few[0][0]
    assert "pg_advisory_unlock" in few[0][-1]
    assert few[0][1].startswith('UPDATE "runtime_operation"')
    selects = [sql for sql in few[0][1:-1] if sql.startswith("SELECT")]
    assert len(selects) == 2
    assert "tenancy_webhookendpoint" in selects[1]
    assert (
        few[1]
        == many[1]
        == [
            f"create {GPUUNIT_RESOURCE}",
            "create resourceclaims.resource.k8s.io",
            "create pods",
        ]
    )
    assert GPUUnit.objects.filter(name__in=["few", "many"], phase="Provisioning").count() == 2
