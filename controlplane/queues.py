"""Which Celery queue a cluster's work goes to (ARCHITECTURE §20): a slow or unreachable
cluster holds up only its own queue.

The process's own cluster (CLUSTER_NAME) keeps the default queue, so one cluster configured
works as before; every other registered cluster has `cluster.<name>`. A worker that takes the
default queue also takes every registered cluster's (what the registry, registered by the
inventory, lists when the worker starts); a worker started with `-Q cluster.<name>` takes that
cluster's work alone."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

# Webhook deliveries (tenancy/webhooks.py): their own queue and their own workers (`celery
# worker -Q webhooks`: make run, k8s/control-plane/webhook-worker.yaml, the tests' `hooks`
# worker), so a slow receiver never holds a unit's work. No other worker takes it.
WEBHOOKS = "webhooks"

# -> the names of the registered, enabled clusters (registered by the inventory: apps.py)
_registered: Callable[[], list[str]] | None = None


def register(names: Callable[[], list[str]]) -> None:
    global _registered
    _registered = names


def queue_for(cluster: str) -> str | None:
    """The queue of work on `cluster`; None for the default queue (the process's own)."""
    if not cluster or cluster == settings.CLUSTER_NAME:
        return None
    return f"cluster.{cluster}"


def cluster_queues() -> list[str]:
    """The queues of the registered clusters other than the process's own."""
    names = _registered() if _registered is not None else []
    return [queue for name in names if (queue := queue_for(name)) is not None]
