"""A deletion that arrives while the create is being carried out ends the create the same way
every time: `failed` with `cancelled`, no Provisioned event after DeletionRequested, and nothing
left in the cluster. The worker's steps are called here in the order under test, against the
simulated cluster (no Celery: the race is made deterministic, not waited for)."""

from __future__ import annotations

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from runtime import lifecycle, orders
from runtime.control import provisioning
from runtime.models import Operation, OperationKind, OperationStatus, UnitEvent
from runtime.tests.helpers import remove_namespace_objects, unit_objects, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("cluster")]


@pytest.fixture
def unit(session_worker_paused, tenant):
    """An order whose operations only this test carries out (the session's worker, if one is
    up from an earlier test, takes no task meanwhile)."""
    PackageFactory(article=True)
    yield orders.create_unit(
        tenant=tenant,
        operation_id="race-1",
        name="race",
        package_id=ARTICLE_PACKAGE_ID,
        image="python:3.12",
    ).unit
    remove_namespace_objects(tenant.namespace)


def create_operation(unit) -> Operation:
    return Operation.objects.get(unit=unit, kind=OperationKind.CREATE)


def reasons(unit) -> list[str]:
    return list(UnitEvent.objects.filter(unit=unit).order_by("id").values_list("reason", flat=True))


def test_deletion_while_objects_are_created_cancels_the_create(unit, tenant, monkeypatch):
    create = provisioning.provision_objects

    def create_then_deletion_arrives(contract):
        created = create(contract)
        lifecycle.request_unit_deletion(tenant=tenant, name=unit.name)
        return created

    monkeypatch.setattr(provisioning, "provision_objects", create_then_deletion_arrives)
    provisioning.provision_unit(operation_pk=create_operation(unit).pk)

    operation = create_operation(unit)
    assert (operation.status, operation.error_code) == (OperationStatus.FAILED, "cancelled")
    assert "Provisioned" not in reasons(unit)
    assert reasons(unit)[-1] == "DeletionRequested"
    # The worker removed what it had just created (the deletion's sweep may have come first).
    # The cluster finishes a removal after the call: the claim goes once its pod is gone and
    # the resourceclaim controller lifts its finalizer, so the test waits for that.
    nothing = {"gpuunit": None, "claim": None, "pod": None}
    wait_until(lambda: unit_objects(unit) == nothing, "the unit's objects to be gone")
    delete = Operation.objects.get(unit=unit, kind=OperationKind.DELETE)
    provisioning.delete_unit(operation_pk=delete.pk)
    unit.refresh_from_db()
    assert unit.phase == "Terminated"


def test_deletion_before_the_worker_starts_cancels_the_create(unit, tenant):
    lifecycle.request_unit_deletion(tenant=tenant, name=unit.name)
    provisioning.provision_unit(operation_pk=create_operation(unit).pk)
    operation = create_operation(unit)
    assert (operation.status, operation.error_code) == (OperationStatus.FAILED, "cancelled")
    assert "Provisioned" not in reasons(unit)
    assert unit_objects(unit) == {"gpuunit": None, "claim": None, "pod": None}


def test_deletion_after_provisioning_leaves_the_create_succeeded(unit, tenant):
    provisioning.provision_unit(operation_pk=create_operation(unit).pk)
    lifecycle.request_unit_deletion(tenant=tenant, name=unit.name)
    assert create_operation(unit).status == OperationStatus.SUCCEEDED
    assert reasons(unit)[-2:] == ["Provisioned", "DeletionRequested"]
