"""The inventory's contribution to /api/v1/health and /metrics: how old the mirror is, and
each registered cluster's health (one query for both)."""

from collections.abc import Iterable

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from inventory.clusters import Health
from inventory.selectors import cluster_states, freshness_of


def check_inventory() -> dict:
    states = cluster_states()
    freshness = freshness_of(states)
    body = {
        "ok": not freshness.stale,
        "lastSync": freshness.as_of.isoformat() if freshness.as_of else None,
        "clusters": [
            {
                "name": state.cluster.name,
                "region": state.cluster.region,
                "enabled": state.cluster.enabled,
                "cordoned": state.cluster.cordoned,
                "health": state.health,
            }
            for state in states
        ],
    }
    if freshness.last_error:
        # Public: that it failed, not its text (hosts, addresses); the admin's sync runs say it.
        body["error"] = "the last inventory sync failed (Admin → Sync runs has its error)"
    return body


def collect_gauges() -> Iterable[Metric]:
    states = cluster_states()
    freshness = freshness_of(states)
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
    reachable = GaugeMetricFamily(
        "controlplane_cluster_reachable",
        "1 while an enabled cluster is listed, 0 once unreachable (CLUSTER_LOST_AFTER_SECONDS); "
        "absent before its first listing.",
        labels=["cluster", "region"],
    )
    cordoned = GaugeMetricFamily(
        "controlplane_cluster_cordoned",
        "1 when a cluster takes no new units.",
        labels=["cluster", "region"],
    )
    for state in states:
        labels = [state.cluster.name, state.cluster.region]
        cordoned.add_metric(labels, 1 if state.cluster.cordoned else 0)
        if state.cluster.enabled and state.health != Health.UNKNOWN:
            reachable.add_metric(labels, 1 if state.health == Health.REACHABLE else 0)
    yield reachable
    yield cordoned
