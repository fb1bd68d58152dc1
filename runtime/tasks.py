"""Celery tasks of the runtime: each is one service call, named after it. Operations arrive by
name from the outbox (runtime/outbox.py), which never imports this module."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import timedelta

from celery import Task, shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from controlplane import metrics, queues
from controlplane.kube.errors import KubeError, TemporaryError
from inventory import clusters as inventory_clusters
from inventory import selectors as inventory_selectors
from runtime import actions, lifecycle, outbox, storage, tenant_secrets, usage_audit
from runtime.control import preemption, provisioning, reconcile, volumes
from runtime.control import reservations as reservation_control

logger = logging.getLogger(__name__)


def _backoff(retries: int, floor: float) -> float:
    # Exponential with jitter, capped so a retry always lands before the sweeper's threshold.
    ceiling = max(1.0, settings.OPERATION_STALE_SECONDS / 2)
    return min(ceiling, floor * 2**retries) * random.uniform(0.8, 1.2)


def _run_operation(task: Task, run: Callable[..., None], operation_pk: int) -> None:
    try:
        run(operation_pk=operation_pk)
    except (OperationalError, InterfaceError) as exc:
        # The database dropped our connection (restart, failover, pg_terminate_backend):
        # start the next attempt on a fresh one.
        connection.close()
        raise task.retry(countdown=_backoff(task.request.retries, 1.0), exc=exc) from exc
    except TemporaryError as exc:
        outbox.note_operation_retry(operation_pk=operation_pk, message=exc.message)
        raise task.retry(countdown=_backoff(task.request.retries, exc.delay), exc=exc) from exc


@shared_task(name=outbox.PROVISION_TASK, bind=True, max_retries=None)
def provision_unit(self: Task, operation_pk: int) -> None:
    _run_operation(self, provisioning.provision_unit, operation_pk)


@shared_task(name=outbox.DELETE_TASK, bind=True, max_retries=None)
def delete_unit(self: Task, operation_pk: int) -> None:
    _run_operation(self, provisioning.delete_unit, operation_pk)


@shared_task(name=outbox.STOP_TASK, bind=True, max_retries=None)
def stop_unit(self: Task, operation_pk: int) -> None:
    _run_operation(self, provisioning.stop_unit, operation_pk)


@shared_task(name=outbox.ROLL_OUT_TASK, bind=True, max_retries=None)
def roll_out_unit(self: Task, operation_pk: int) -> None:
    _run_operation(self, provisioning.roll_out_unit, operation_pk)


@shared_task(name="runtime.stop_expired_units", expires=30)
def stop_expired_units() -> int:
    """Database only: the stops it records are carried out by stop_unit."""
    return actions.stop_expired_units()


@shared_task(name="runtime.preempt", expires=30)
def preempt() -> tuple[int, int, int]:
    """The stops and starts it records are carried out by stop_unit and roll_out_unit; it
    taints and untaints handed-over devices itself (each in its unit's cluster)."""
    return preemption.run()


@shared_task(name="runtime.reservations", expires=30)
def reservations() -> tuple[int, int]:
    """Start and end reservations and keep their placeholders (each in its cluster)."""
    return reservation_control.run()


@shared_task(name=storage.PROVISION_STORAGE_TASK, bind=True, max_retries=None)
def provision_storage(self: Task, storage_pk: int) -> None:
    _run_storage(self, volumes.provision_storage, storage_pk)


@shared_task(name=storage.DELETE_STORAGE_TASK, bind=True, max_retries=None)
def delete_storage(self: Task, storage_pk: int) -> None:
    _run_storage(self, volumes.finish_storage_deletion, storage_pk)


@shared_task(name=tenant_secrets.ENSURE_NAMESPACE_TASK, bind=True, max_retries=5)
def ensure_tenant_namespace(self: Task, tenant_pk: int) -> None:
    """A secret was sent before the tenant's namespace existed (its first unit or storage
    makes it otherwise)."""
    _run_storage(self, provisioning.ensure_tenant_namespace_of, tenant_pk)


def _run_storage(task: Task, run: Callable[[int], None], storage_pk: int) -> None:
    try:
        run(storage_pk)
    except (OperationalError, InterfaceError) as exc:
        connection.close()
        raise task.retry(countdown=_backoff(task.request.retries, 1.0), exc=exc) from exc
    except TemporaryError as exc:
        raise task.retry(countdown=_backoff(task.request.retries, exc.delay), exc=exc) from exc


@shared_task(name="runtime.enforce_budgets", expires=60)
def enforce_budgets() -> int:
    """Beat: budget alerts, and the units of spent enforced budgets stopped after the grace."""
    return actions.enforce_budgets()


@shared_task(name="runtime.audit_usage", expires=600)
def audit_usage() -> int:
    """Beat: the usage audit of the last day, as a metric (and a warning per difference)."""
    now = timezone.now()
    differences = usage_audit.audit(now - timedelta(days=1), now, now=now)
    for difference in differences:
        logger.warning("usage audit: %s", difference)
    metrics.USAGE_AUDIT_DIFFERENCES.set(len(differences))
    return len(differences)


@shared_task(name="runtime.reconcile_units", expires=30)
def reconcile_units(cluster: str = "") -> None:
    """Beat's backstop tick: one page of each enabled cluster's units (every unit visited once
    per cycle), the other clusters' pages sent to their queues, the process's own cluster's
    (and the storages) worked here; with a cluster, a page of that cluster's."""
    if cluster:
        _reconcile_page(cluster)
        _sync_storages(cluster)
        return
    states = [s for s in inventory_selectors.cluster_states() if s.cluster.enabled]
    enabled = [s.cluster.name for s in states]
    for state in states:
        if state.health == inventory_clusters.Health.UNREACHABLE:
            # Database only: the cluster's own queue may be stuck on it.
            lifecycle.mark_cluster_unreachable(state.cluster.name, since=state.as_of)
    for name in enabled:
        if name != settings.CLUSTER_NAME:
            reconcile_units.apply_async(args=[name], queue=queues.queue_for(name))
    if settings.CLUSTER_NAME in enabled:
        _reconcile_page(settings.CLUSTER_NAME)
    _sync_storages(settings.CLUSTER_NAME)


def _reconcile_page(cluster: str) -> None:
    result = reconcile.reconcile_page(cluster)
    if result.changed or result.recreated or result.terminated:
        logger.info("reconcile of %s: %s", cluster, result)


def _sync_storages(cluster: str) -> None:
    try:
        if changed := volumes.sync_storages(cluster):
            logger.info("reconcile of %s: %s storages changed", cluster, changed)
    except KubeError:
        logger.warning("storage sync of %s skipped: cannot list claims", cluster, exc_info=True)


@shared_task(name="runtime.recount_usage", expires=30)
def recount_usage() -> list[str]:
    """Database only: runs even while the cluster is unreachable."""
    return lifecycle.recount_usage()


@shared_task(name="runtime.sweep_operations", expires=60)
def sweep_operations() -> int:
    return outbox.sweep_operations()
