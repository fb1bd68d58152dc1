"""Project-level Celery tasks."""

from celery import shared_task

from controlplane import health


@shared_task(name="controlplane.heartbeat", ignore_result=True, soft_time_limit=10)
def heartbeat() -> None:
    """Record that a worker picked up a beat-scheduled task, so health can tell both are alive."""
    health.record_heartbeat()
