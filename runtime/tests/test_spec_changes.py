"""Changes the control plane makes to a unit's spec itself (an SSH key the tenant removed): a
new generation, rolled out by an update operation of its own; while another operation on the
unit is open, that operation's end rolls the newer generation out after it (database only)."""

from __future__ import annotations

import pytest

from runtime import lifecycle
from runtime.models import GPUUnit, Operation, OperationKind, UnitPhase
from runtime.tests.factories import UnitFactory
from tenancy import services as tenancy_services
from tenancy.tests.test_sshkeys import ECDSA384, ED25519

pytestmark = pytest.mark.django_db


def ssh_unit(tenant, **fields) -> GPUUnit:
    tenancy_services.add_ssh_key(tenant=tenant, name="laptop", public_key=ED25519)
    tenancy_services.add_ssh_key(tenant=tenant, name="desktop", public_key=ECDSA384)
    return UnitFactory(
        tenant=tenant,
        ssh={"enabled": True, "keys": ["laptop", "desktop"]},
        unit_k8s_uid="uid-1",
        **{"observed_generation": 1, **fields},
    )


def rollouts(unit: GPUUnit) -> list[Operation]:
    return list(unit.operations.filter(operation_id__startswith="@rollout-").order_by("id"))


def test_a_removed_key_is_a_new_generation_rolled_out_by_an_operation_of_its_own(tenant):
    unit = ssh_unit(tenant, phase=UnitPhase.RUNNING)
    tenancy_services.remove_ssh_key(tenant=tenant, name="desktop")
    unit.refresh_from_db()
    assert unit.ssh["keys"] == ["laptop"]
    assert (unit.generation, unit.observed_generation) == (2, 1)
    assert unit.rolling_out
    (operation,) = rollouts(unit)
    assert (operation.kind, operation.status) == (OperationKind.UPDATE, "pending")
    assert operation.operation_id == f"@rollout-{unit.uid}-2"


def test_a_key_removed_while_an_operation_is_open_is_rolled_out_after_it(tenant):
    unit = ssh_unit(tenant, phase=UnitPhase.PROVISIONING, generation=2, observed_generation=1)
    restart = Operation.objects.create(
        tenant=tenant, operation_id="r-1", kind=OperationKind.RESTART, request_hash="x", unit=unit
    )
    as_claimed = GPUUnit.objects.get(pk=unit.pk)  # what the restart's worker read (generation 2)
    tenancy_services.remove_ssh_key(tenant=tenant, name="desktop")
    assert rollouts(unit) == []  # one open operation at a time: the restart carries it on

    assert lifecycle.record_rolled_out(as_claimed, restart, pod_k8s_uid="pod-2", exposed=None)
    unit.refresh_from_db()
    # The restart rolled out generation 2 only; generation 3 (the key gone) follows it.
    assert (unit.generation, unit.observed_generation) == (3, 2)
    (operation,) = rollouts(unit)
    assert operation.operation_id == f"@rollout-{unit.uid}-3"
    restart.refresh_from_db()
    assert restart.status == "succeeded"


def test_a_key_removed_while_the_unit_is_created_is_rolled_out_after_the_create(tenant):
    unit = ssh_unit(tenant, phase=UnitPhase.PROVISIONING, observed_generation=0)
    create = Operation.objects.create(
        tenant=tenant, operation_id="c-1", kind=OperationKind.CREATE, request_hash="x", unit=unit
    )
    as_claimed = GPUUnit.objects.get(pk=unit.pk)  # what the create's worker read (generation 1)
    tenancy_services.remove_ssh_key(tenant=tenant, name="desktop")
    assert rollouts(unit) == []  # one open operation at a time: the create carries it on

    assert lifecycle.record_provisioned(
        as_claimed, create, unit_k8s_uid="uid-1", claim_k8s_uid="claim-1", pod_k8s_uid="pod-1"
    )
    unit.refresh_from_db()
    # The create built generation 1; generation 2 (the key gone) follows it.
    assert (unit.generation, unit.observed_generation) == (2, 1)
    assert (unit.unit_k8s_uid, unit.claim_k8s_uid, unit.pod_k8s_uid) == (
        "uid-1",
        "claim-1",
        "pod-1",
    )
    assert list(unit.events.filter(reason="Provisioned").values_list("count", flat=True)) == [1]
    (operation,) = rollouts(unit)
    assert operation.operation_id == f"@rollout-{unit.uid}-2"
    create.refresh_from_db()
    assert create.status == "succeeded"


def test_a_unit_without_the_key_is_left_alone(tenant):
    unit = ssh_unit(tenant, phase=UnitPhase.RUNNING)
    GPUUnit.objects.filter(pk=unit.pk).update(ssh={"enabled": True, "keys": ["laptop"]})
    tenancy_services.remove_ssh_key(tenant=tenant, name="desktop")
    unit.refresh_from_db()
    assert unit.generation == 1
    assert rollouts(unit) == []
