"""Scrape-time gauges of the runtime, read from the database when /metrics is scraped (every
web process reports the same truth): units by phase, open and failed operations."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from runtime import selectors


def collect() -> Iterable[Metric]:
    units = GaugeMetricFamily(
        "controlplane_units", "GPU units by phase (Terminated ones left out).", labels=["phase"]
    )
    for phase, count in selectors.count_units_by_phase():
        units.add_metric([phase], count)
    yield units
    operations = GaugeMetricFamily(
        "controlplane_operations",
        "Operations that are open (pending, running) or failed, by kind and status.",
        labels=["kind", "status"],
    )
    for kind, status, count in selectors.count_operations_by_status():
        operations.add_metric([kind, status], count)
    yield operations
