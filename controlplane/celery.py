"""Celery application; configuration comes from Django settings (CELERY_* names)."""

import logging
import os

import redis
from celery import Celery
from celery.signals import (
    celeryd_after_setup,
    task_postrun,
    task_prerun,
    worker_init,
    worker_ready,
)
from django.conf import settings
from django.db import DatabaseError, close_old_connections

from controlplane import health, metrics, queues
from controlplane.beat import beat_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.beat_schedule = {}
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **_kwargs: object) -> None:
    sender.conf.beat_schedule = beat_schedule()


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(**_kwargs: object) -> None:
    """A task's database connections live as a request's do (CELERY_DB_REUSE_MAX keeps Celery
    from closing them around every task): closed once older than DB_CONN_MAX_AGE or broken,
    and health-checked before their first use in the next task."""
    close_old_connections()


@worker_init.connect
def _serve_metrics(**_kwargs: object) -> None:
    """The worker's /metrics (WORKER_METRICS_PORT), from its main process; with the prefork
    pool, PROMETHEUS_MULTIPROC_DIR makes it show what the pool's children did."""
    if settings.WORKER_METRICS_PORT:
        metrics.clear_multiprocess_directory()  # before the pool's children start writing
        metrics.serve(settings.WORKER_METRICS_PORT)


@celeryd_after_setup.connect
def _consume_cluster_queues(sender: str, instance: object, **_kwargs: object) -> None:
    """A worker that takes the default queue takes every registered cluster's too (a worker
    started with -Q for named queues takes those alone), never the webhooks': deliveries have
    workers of their own (`-Q webhooks`), so a slow receiver holds no unit's work:
    controlplane/queues.py."""
    selected = app.amqp.queues
    if app.conf.task_default_queue not in selected.consume_from:
        return
    try:
        added = queues.cluster_queues()
    except DatabaseError:  # the database away at start: the own cluster's work still runs
        logging.getLogger(__name__).warning(
            "cannot read the cluster registry: consuming the default queue only", exc_info=True
        )
        return
    for queue in added:
        selected.select_add(queue)
    if added:
        logging.getLogger(__name__).info("consuming the clusters' queues too: %s", added)


@worker_ready.connect
def _first_heartbeat(**_kwargs: object) -> None:
    """Say the worker is up as soon as it consumes, not at beat's first heartbeat tick (health
    would call a fresh stack degraded for up to HEARTBEAT_INTERVAL_SECONDS)."""
    try:
        health.record_heartbeat()
    except redis.RedisError:  # Redis briefly away: beat's next heartbeat says it
        logging.getLogger(__name__).warning("could not record the first heartbeat", exc_info=True)
