"""Celery tasks of the inventory."""

from celery import shared_task
from django.conf import settings

from controlplane import queues
from inventory import clusters, sync


@shared_task(name="inventory.sync_inventory", expires=60, soft_time_limit=120, time_limit=150)
def sync_inventory(cluster: str = "") -> int | None:
    """Beat's tick (no cluster): each enabled cluster's sync sent to that cluster's queue, the
    process's own synced here; with a cluster, that cluster's."""
    if not cluster:
        for name in clusters.enabled_names():
            if name != settings.CLUSTER_NAME:
                sync_inventory.apply_async(args=[name], queue=queues.queue_for(name))
        cluster = settings.CLUSTER_NAME
        if cluster not in clusters.enabled_names():
            return None
    run = sync.sync_inventory(cluster)
    return run.pk if run else None
