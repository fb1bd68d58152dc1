"""Celery tasks of the inventory."""

from celery import shared_task

from inventory import sync


@shared_task(name="inventory.sync_inventory", expires=60, soft_time_limit=120, time_limit=150)
def sync_inventory() -> int | None:
    run = sync.sync_inventory()
    return run.pk if run else None
