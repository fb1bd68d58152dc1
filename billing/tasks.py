"""Beat's ledger work (thin: the logic is billing.ledger's)."""

from __future__ import annotations

from celery import shared_task

from billing import ledger


@shared_task(name="billing.seal_meters", ignore_result=True)
def seal_meters() -> int:
    return ledger.seal_meters()
