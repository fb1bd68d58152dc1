"""k8s/components/monitoring: the ServiceMonitor scrapes every process, and the alert rules
and the Grafana dashboard ask only for metrics the processes expose."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from controlplane import metrics
from tests.test_manifests import K8S, kustomize, needs_kubectl

MONITORING = K8S / "components" / "monitoring"
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[tuple[str, str], dict]:
    overlay = tmp_path_factory.mktemp("monitoring")
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(K8S, overlay)],
                "components": [os.path.relpath(MONITORING, overlay)],
            }
        )
    )
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in kustomize(overlay)}


@pytest.fixture
def exposed(db) -> set[str]:
    """Every metric family a web exposition shows (in-process samples and scrape-time
    gauges), which are the same metric objects the worker and observer update."""
    text = metrics.exposition(with_scrape_time=True).decode()
    return {family.name for family in text_string_to_metric_families(text)}


def _base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def _asked_for(expressions: list[str]) -> set[str]:
    return {_base(name) for expr in expressions for name in re.findall(r"controlplane_\w+", expr)}


@needs_kubectl
def test_the_service_monitor_scrapes_web_worker_and_observer(rendered):
    monitor = rendered[("ServiceMonitor", "gpu-control-plane")]["spec"]
    ports = {endpoint["port"] for endpoint in monitor["endpoints"]}
    services = [
        obj
        for (kind, _), obj in rendered.items()
        if kind == "Service"
        and obj["metadata"]["labels"].get("app.kubernetes.io/component") in ("web", "metrics")
    ]
    assert {s["metadata"]["name"] for s in services} == {"web", "metrics"}
    assert ports == {port["name"] for s in services for port in s["spec"]["ports"]}
    assert all(endpoint["path"] == "/metrics" for endpoint in monitor["endpoints"])


@needs_kubectl
def test_alerts_cover_stuck_units_stale_inventory_the_lead_and_failures(rendered, exposed):
    rules = rendered[("PrometheusRule", "gpu-control-plane")]["spec"]["groups"][0]["rules"]
    alerts = {rule["alert"]: rule["expr"] for rule in rules}
    assert {
        "GPUUnitsStuckPending",
        "GPUInventoryStale",
        "GPUObserverWithoutLead",
        "GPUOperationsFailing",
    } <= set(alerts)
    asked = _asked_for(list(alerts.values()))
    assert asked
    assert asked <= exposed, asked - exposed


@needs_kubectl
def test_the_dashboard_charts_only_exposed_metrics(rendered, exposed):
    configmap = rendered[("ConfigMap", "gpu-control-plane-grafana-dashboard")]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(configmap["data"]["gpu-control-plane.json"])
    expressions = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    asked = _asked_for(expressions)
    assert len(asked) >= 10
    assert asked <= exposed, asked - exposed
