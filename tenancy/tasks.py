"""Celery tasks of tenancy: webhook delivery (sent by name from tenancy/webhooks.py, on the
webhooks queue, so a slow receiver never holds a unit's work) and its sweeper."""

from __future__ import annotations

from celery import shared_task

from tenancy import webhooks


@shared_task(name=webhooks.DELIVER_TASK, ignore_result=True)
def deliver_webhook(delivery_id: int) -> str:
    return webhooks.deliver(delivery_id)


@shared_task(name="tenancy.sweep_webhooks", ignore_result=True, expires=60)
def sweep_webhooks() -> int:
    return webhooks.sweep()
