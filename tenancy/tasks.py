"""Celery tasks of tenancy: webhook delivery (sent by name from tenancy/webhooks.py, on the
webhooks queue, so a slow receiver never holds a unit's work), its sweeper, and the audit
log's monthly partitions."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from tenancy import audit_partitions, webhooks


@shared_task(name=webhooks.DELIVER_TASK, ignore_result=True)
def deliver_webhook(delivery_id: int) -> str:
    return webhooks.deliver(delivery_id)


@shared_task(name="tenancy.sweep_webhooks", ignore_result=True, expires=60)
def sweep_webhooks() -> int:
    return webhooks.sweep()


@shared_task(name="tenancy.audit_partitions", ignore_result=True, expires=600)
def ensure_audit_partitions() -> list[str]:
    """The audit log's partitions for this month and the next two (hourly: a new month never
    starts without one)."""
    return audit_partitions.ensure(now=timezone.now())
