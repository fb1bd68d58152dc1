"""Beat's ledger work (thin: the logic is billing.ledger's)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from billing import jobs, ledger


@shared_task(name="billing.seal_meters", ignore_result=True)
def seal_meters() -> int:
    return ledger.seal_meters()


@shared_task(
    name="billing.export_usage",
    ignore_result=True,
    soft_time_limit=settings.BILLING_EXPORT_TIME_LIMIT_SECONDS,
    time_limit=settings.BILLING_EXPORT_TIME_LIMIT_SECONDS + 60,
)
def export_usage(export_id: str) -> None:
    jobs.run_export(export_id)


@shared_task(name="billing.sweep_exports", ignore_result=True)
def sweep_exports() -> tuple[int, int]:
    return jobs.sweep_exports()
