"""The inventory's contribution to /api/v1/health and /metrics: how old the mirror is."""

from collections.abc import Iterable

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from inventory.selectors import get_freshness


def check_inventory() -> dict:
    freshness = get_freshness()
    body = {
        "ok": not freshness.stale,
        "lastSync": freshness.as_of.isoformat() if freshness.as_of else None,
    }
    if freshness.last_error:
        body["error"] = freshness.last_error
    return body


def collect_gauges() -> Iterable[Metric]:
    freshness = get_freshness()
    age = GaugeMetricFamily(
        "controlplane_inventory_age_seconds",
        "Seconds since the inventory mirror was last known current (no sync yet: absent).",
    )
    if freshness.as_of is not None:
        age.add_metric([], (timezone.now() - freshness.as_of).total_seconds())
    yield age
    stale = GaugeMetricFamily("controlplane_inventory_stale", "1 when the mirror is stale.")
    stale.add_metric([], 1 if freshness.stale else 0)
    yield stale
