"""The one place that says what Celery beat runs and how often."""

from django.conf import settings


def beat_schedule() -> dict[str, dict]:
    """Periodic tasks by name; intervals come from settings so tests and ops can tune them."""
    return {
        "controlplane.heartbeat": {
            "task": "controlplane.heartbeat",
            "schedule": settings.HEARTBEAT_INTERVAL_SECONDS,
        },
        "inventory.sync_inventory": {
            "task": "inventory.sync_inventory",
            "schedule": settings.INVENTORY_SYNC_INTERVAL_SECONDS,
        },
        "runtime.reconcile_units": {
            "task": "runtime.reconcile_units",
            "schedule": settings.RECONCILE_INTERVAL_SECONDS,
        },
        "runtime.recount_usage": {
            "task": "runtime.recount_usage",
            "schedule": settings.RECONCILE_INTERVAL_SECONDS,
        },
        "runtime.stop_expired_units": {
            "task": "runtime.stop_expired_units",
            "schedule": settings.AUTO_STOP_INTERVAL_SECONDS,
        },
        "runtime.preempt": {
            "task": "runtime.preempt",
            "schedule": settings.PREEMPTION_INTERVAL_SECONDS,
        },
        "runtime.reservations": {
            "task": "runtime.reservations",
            "schedule": settings.RESERVATION_INTERVAL_SECONDS,
        },
        "runtime.enforce_budgets": {
            "task": "runtime.enforce_budgets",
            "schedule": settings.BUDGET_CHECK_INTERVAL_SECONDS,
        },
        "runtime.audit_usage": {
            "task": "runtime.audit_usage",
            "schedule": settings.USAGE_AUDIT_INTERVAL_SECONDS,
        },
        "billing.seal_meters": {
            "task": "billing.seal_meters",
            "schedule": settings.BILLING_SEAL_INTERVAL_SECONDS,
        },
        "billing.sweep_exports": {
            "task": "billing.sweep_exports",
            "schedule": 60.0,
        },
        "tenancy.audit_partitions": {
            "task": "tenancy.audit_partitions",
            "schedule": 3600.0,
        },
        "tenancy.sweep_webhooks": {
            "task": "tenancy.sweep_webhooks",
            "schedule": settings.SWEEP_INTERVAL_SECONDS,
        },
        "runtime.sweep_operations": {
            "task": "runtime.sweep_operations",
            "schedule": settings.SWEEP_INTERVAL_SECONDS,
        },
    }
