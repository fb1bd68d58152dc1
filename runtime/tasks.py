"""Celery tasks of the runtime: thin wrappers that call one service each."""

from __future__ import annotations

import logging
import random
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from controlplane.kube.errors import TemporaryError
from runtime import provisioning, reconcile, services
from runtime.models import Operation

logger = logging.getLogger(__name__)


def _backoff(retries: int, floor: float) -> float:
    # Exponential with jitter, capped so a retry always lands before the sweeper's threshold.
    ceiling = max(1.0, settings.OPERATION_STALE_SECONDS / 2)
    return min(ceiling, floor * 2**retries) * random.uniform(0.8, 1.2)


def _run_operation(task, run, operation_pk: int) -> None:
    try:
        run(operation_pk=operation_pk)
    except (OperationalError, InterfaceError) as exc:
        # The database dropped our connection (restart, failover, pg_terminate_backend):
        # start the next attempt on a fresh one.
        connection.close()
        raise task.retry(countdown=_backoff(task.request.retries, 1.0), exc=exc) from exc
    except TemporaryError as exc:
        operation = Operation.objects.filter(pk=operation_pk).first()
        if operation is not None:
            services.note_operation_retry(operation, message=exc.message)
        raise task.retry(countdown=_backoff(task.request.retries, exc.delay), exc=exc) from exc


@shared_task(name="runtime.provision_unit", bind=True, max_retries=None)
def provision_unit(self, operation_pk: int) -> None:
    _run_operation(self, provisioning.provision_unit, operation_pk)


@shared_task(name="runtime.terminate_unit", bind=True, max_retries=None)
def terminate_unit(self, operation_pk: int) -> None:
    _run_operation(self, provisioning.terminate_unit, operation_pk)


@shared_task(name="runtime.reconcile_units", expires=30)
def reconcile_units() -> None:
    services.recount_usage()  # database only: runs even when the cluster is unreachable
    result = reconcile.reconcile_units()
    if result.changed or result.recreated or result.terminated:
        logger.info("reconcile: %s", result)


@shared_task(name="runtime.sweep_operations", expires=60)
def sweep_operations() -> int:
    """Re-send operations nobody has touched for a while (lost message, broker outage)."""
    threshold = timezone.now() - timedelta(seconds=settings.OPERATION_STALE_SECONDS)
    stale = services.stale_operations(older_than=threshold)
    for operation in stale:
        Operation.objects.filter(pk=operation.pk).update(updated_at=timezone.now())
        services.enqueue(operation)
    return len(stale)
