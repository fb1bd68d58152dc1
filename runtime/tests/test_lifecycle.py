"""Lifecycle against the simulated cluster: retries through faults, foreign objects, a lost pod,
an unreachable cluster, the sweeper, and tenant namespaces."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import DEFAULT_DB_ALIAS, connections
from django.utils import timezone

from catalog.tests.factories import PackageFactory
from controlplane import kube
from runtime import lifecycle, manifests, orders, outbox
from runtime.control import reconcile
from runtime.control.provisioning import (
    ensure_tenant_namespace,
    ensure_tenant_namespace_of,
    ensure_tenant_namespace_once,
    provision_unit,
)
from runtime.models import GPUUnit, Operation, OperationStatus
from runtime.tasks import sweep_operations
from runtime.tests.factories import UnitFactory
from runtime.tests.helpers import (
    remove_namespace_objects,
    unit_objects,
    wait_for_phase,
    wait_until,
)
from tenancy.tests.factories import TenantFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


@pytest.fixture(autouse=True)
def _package_and_cleanup(tenant, cluster):
    PackageFactory(article=True)
    yield
    cluster.faults.clear()
    remove_namespace_objects(tenant.namespace)


def unqueued_order(tenant, name: str) -> tuple[GPUUnit, Operation]:
    """A committed unit and create operation whose message never reached a worker."""
    unit = UnitFactory(tenant=tenant, name=name, image="busybox")
    operation = Operation.objects.create(
        tenant=tenant, operation_id=f"op-{name}", kind="create", request_hash="x" * 64, unit=unit
    )
    lifecycle.recount_usage()  # charge the tenant for it, as an order would have
    return unit, operation


def create(tenant, name: str = "demo") -> GPUUnit:
    return orders.create_unit(
        tenant=tenant,
        operation_id=f"op-{name}",
        name=name,
        package_id="gpu-rtx3080-2x-cpu10-mem40g",
        image="python:3.12",
    ).unit


def test_tenant_namespace_is_restricted_and_has_the_quota(tenant):
    ensure_tenant_namespace(tenant)
    ensure_tenant_namespace(tenant)  # idempotent
    namespace = kube.get(kube.NAMESPACE, None, tenant.namespace)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    quota = kube.get(kube.RESOURCEQUOTA, tenant.namespace, "gpu-units")
    assert quota["spec"]["hard"] == {
        "requests.cpu": "160",
        "requests.memory": "256Gi",
        "count/resourceclaims.resource.k8s.io": "64",
        "requests.storage": "1Ti",
        "persistentvolumeclaims": "16",
        "services.nodeports": "32",
        "services.loadbalancers": "8",
        "requests.ephemeral-storage": "1Ti",
        "limits.ephemeral-storage": "1Ti",
        "count/secrets": "64",
    }


def test_the_namespace_task_remembers_what_it_ensured(tenant, cluster):
    # What a secret sent before the namespace exists queues: the next provisioning in this
    # process does not ensure it all over again.
    ensure_tenant_namespace_of(tenant.pk)
    cluster.requests.clear()
    ensure_tenant_namespace_once(tenant)
    assert cluster.requests.entries() == []


def test_transient_cluster_errors_are_retried_until_running(tenant, cluster):
    cluster.faults.set(verb="create", error_rate=0.3, status=500)
    unit = wait_for_phase(create(tenant), "Running", timeout=90)
    operation = Operation.objects.get(unit=unit)
    assert operation.status == OperationStatus.SUCCEEDED
    assert cluster.requests.count(verb="create") > 3
    for kind in (kube.GPUUNIT, kube.RESOURCECLAIM, kube.POD):
        assert len(kube.list_objects(kind, namespace=tenant.namespace)) == 1


def test_foreign_object_in_the_way_fails_without_touching_it(tenant):
    ensure_tenant_namespace(tenant)
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "unit-demo-gpu", "labels": {"team": "someone-else"}},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "nvidia-h100",
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        },
    }
    kube.create(kube.RESOURCECLAIM, tenant.namespace, foreign)
    unit = wait_for_phase(create(tenant), "Failed")
    assert unit.reason == "NameInUse"
    assert "not managed by this control plane" in unit.message
    still_there = kube.get(kube.RESOURCECLAIM, tenant.namespace, "unit-demo-gpu")
    assert still_there["metadata"]["labels"] == {"team": "someone-else"}
    assert kube.get(kube.GPUUNIT, tenant.namespace, "demo") is None
    assert kube.get(kube.POD, tenant.namespace, "unit-demo") is None


def lose_pod(unit: GPUUnit, namespace: str) -> None:
    """Delete the unit's pod behind the control plane's back and wait until it is gone: a
    deleted pod terminates first (KWOK finishes its deletion a moment later, longer on a busy
    machine), and a reconcile that still sees it terminating has nothing to recreate yet."""
    name = manifests.pod_name_for(unit.name)
    kube.delete(kube.POD, namespace, name)
    wait_until(
        lambda: (
            (kube.get(kube.POD, namespace, name) or {}).get("metadata", {}).get("uid")
            != unit.pod_k8s_uid
        ),
        "the pod to be gone",
    )


def test_lost_pod_is_recreated(tenant):
    unit = wait_for_phase(create(tenant), "Running")
    old_uid = unit.pod_k8s_uid
    lose_pod(unit, tenant.namespace)
    reconcile.reconcile_units()
    assert unit.events.filter(reason="PodRecreated").exists()
    unit = wait_for_phase(unit, "Running")
    assert unit_objects(unit)["pod"]["metadata"]["uid"] != old_uid


def test_a_permanent_error_recreating_the_pod_fails_the_unit_with_its_reason(tenant):
    """A ResourceQuota of no pods refuses the lost pod's recreation (403, exceeded quota):
    the unit is Failed/QuotaExceeded with the cluster's message, not left in Pending forever;
    once the quota has room the backstop creates the pod and the unit runs again."""
    unit = wait_for_phase(create(tenant), "Running")
    no_pods = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods", "namespace": tenant.namespace},
        "spec": {"hard": {"pods": "0"}},
    }
    kube.create(kube.RESOURCEQUOTA, tenant.namespace, no_pods)
    try:
        lose_pod(unit, tenant.namespace)
        result = reconcile.reconcile_units()
        assert result.failed == 1
        unit.refresh_from_db()
        assert (unit.phase, unit.reason) == ("Failed", "QuotaExceeded")
        assert "exceeded quota" in unit.message
        assert unit.events.filter(reason="QuotaExceeded", type="Warning").exists()
        assert unit_objects(unit)["pod"] is None
    finally:
        kube.delete(kube.RESOURCEQUOTA, tenant.namespace, "no-pods")
    unit = wait_for_phase(unit, "Running")
    assert unit.events.filter(reason="PodRecreated").exists()


def test_unreachable_cluster_keeps_last_known_status(tenant, cluster):
    unit = wait_for_phase(create(tenant), "Running")
    known = (unit.phase, unit.dra, unit.node_name)
    cluster.faults.unreachable = True
    try:
        result = reconcile.reconcile_units()
    finally:
        cluster.faults.unreachable = False
    assert result.skipped
    unit.refresh_from_db()
    assert (unit.phase, unit.dra, unit.node_name) == known
    assert unit.dra["allocated"] is True


def test_sweeper_sends_operations_whose_message_was_lost(tenant):
    """A unit and its operation committed, but the queue never got the message."""
    unit, operation = unqueued_order(tenant, "lost")
    Operation.objects.filter(pk=operation.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    assert sweep_operations() == 1
    wait_for_phase(unit, "Running")
    assert sweep_operations() == 0


def test_a_second_delivery_leaves_an_operation_another_worker_is_carrying_out(tenant):
    """The sweeper sends an operation again when it looks stale, even while a slow worker
    still carries it out: the second delivery must neither race the first nor count an
    attempt (enough of them and the operation would give up on a unit being made)."""
    unit, operation = unqueued_order(tenant, "twice")
    worker = connections.create_connection(DEFAULT_DB_ALIAS)  # the first worker's connection
    try:
        with worker.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_lock(%s, hashtext(%s))",
                [outbox.OPERATION_LOCK, str(operation.pk)],
            )
        provision_unit(operation_pk=operation.pk)
        operation.refresh_from_db()
        assert (operation.status, operation.attempts) == ("pending", 0)
        assert kube.get(kube.GPUUNIT, unit.namespace, unit.name) is None
        with worker.cursor() as cursor:  # the first worker is done with it
            cursor.execute(
                "SELECT pg_advisory_unlock(%s, hashtext(%s))",
                [outbox.OPERATION_LOCK, str(operation.pk)],
            )
    finally:
        # (A worker that dies loses the lock with its connection too, once PostgreSQL has
        # seen the connection end: not at once, so this test does not wait for that.)
        worker.close()
    provision_unit(operation_pk=operation.pk)
    operation.refresh_from_db()
    assert (operation.status, operation.attempts) == ("succeeded", 1)
    assert kube.get(kube.GPUUNIT, unit.namespace, unit.name) is not None


def test_operation_gives_up_after_bounded_attempts(tenant, settings):
    unit, operation = unqueued_order(tenant, "doomed")
    # Every attempt so far failed; this is the one past the cap (run here, not by the worker,
    # whose cap the test environment raises for the fault scenarios).
    Operation.objects.filter(pk=operation.pk).update(
        status=OperationStatus.RUNNING, attempts=settings.OPERATION_MAX_ATTEMPTS
    )
    provision_unit(operation_pk=operation.pk)
    unit.refresh_from_db()
    assert unit.phase == "Failed"
    assert unit.reason == "ProvisioningFailed"
    operation = Operation.objects.get(unit=unit)
    assert (operation.status, operation.error_code) == ("failed", "ProvisioningFailed")


def test_without_namespace_provisioning_a_missing_namespace_fails_clearly(settings):
    settings.TENANT_NAMESPACE_PROVISIONING = False
    stranger = TenantFactory(namespace=f"never-created-{uuid.uuid4().hex[:8]}")
    unit, operation = unqueued_order(stranger, "demo")
    provision_unit(operation_pk=operation.pk)
    unit.refresh_from_db()
    assert (unit.phase, unit.reason) == ("Failed", "NamespaceNotFound")
    assert "administrator" in unit.message
    assert kube.get(kube.NAMESPACE, None, stranger.namespace) is None
