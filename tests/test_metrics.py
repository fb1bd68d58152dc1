"""Prometheus metrics on every process: web's /metrics (all gunicorn workers' samples plus
the gauges read from the database and broker at scrape time), the Celery worker's and the
observer's ports."""

from __future__ import annotations

import time
import urllib.request

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from conftest import start_worker, stop_worker
from controlplane import metrics
from devstack.services import free_port
from inventory.models import Cluster, InventorySnapshot
from runtime import orders
from runtime.tests.helpers import remove_namespace_objects
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = pytest.mark.django_db


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


def test_web_metrics_show_api_latency_units_operations_and_the_queue(client):
    tenant = TenantFactory()
    PackageFactory(article=True)
    api = client_for(tenant)
    assert api.get("/api/v1/packages").status_code == 200
    orders.create_unit(
        tenant=tenant, operation_id="m-1", name="m-1", package_id=ARTICLE_PACKAGE_ID, image="x"
    )
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    count = value(
        text,
        "controlplane_api_request_duration_seconds_count",
        route="/api/v1/packages",
        method="GET",
        status="200",
    )
    assert (count or 0) >= 1
    assert value(text, "controlplane_units", phase="Accepted") == 1
    assert value(text, "controlplane_operations", kind="create", status="pending") == 1
    assert value(text, "controlplane_task_queue_depth", queue="celery") is not None
    assert value(text, "controlplane_inventory_stale") == 1  # never synced in this test
    # A unit's name never becomes a label: routes are URL patterns.
    api.get("/api/v1/gpu-units/m-1")
    text = client.get("/metrics").content.decode()
    assert 'route="/api/v1/gpu-units/<str:name>"' in text
    assert "m-1" not in text.split("controlplane_units")[0]


def test_web_metrics_answer_a_scraper_at_the_pod_ip_in_production_mode(client, settings):
    settings.ALLOWED_HOSTS = ["gpu.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    response = client.get("/metrics", HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200
    assert b"controlplane_units" in response.content
    assert client.get("/api/v1/health", HTTP_HOST="10.1.2.3:8000").status_code == 400
    assert client.post("/metrics").status_code == 405


def test_web_metrics_need_the_token_when_one_is_set(client, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_kube_calls_are_counted_by_verb_and_outcome(cluster):
    from controlplane import kube

    before = samples(metrics.exposition(with_scrape_time=False).decode())
    assert kube.get(kube.NAMESPACE, None, "no-such-namespace") is None
    kube.list_objects(kube.NODE)
    after = samples(metrics.exposition(with_scrape_time=False).decode())

    def delta(verb: str, outcome: str) -> float:
        key = ("controlplane_kube_requests_total", (("outcome", outcome), ("verb", verb)))
        return after.get(key, 0) - before.get(key, 0)

    assert delta("get", "not_found") == 1
    assert delta("list", "ok") == 1


def test_a_process_serves_its_own_metrics_on_a_port(cluster):
    from controlplane import kube

    port = free_port()
    server = metrics.serve(port)
    try:

        def scrape() -> str:
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.read().decode()

        before = value(scrape(), "controlplane_kube_requests_total", verb="list", outcome="ok")
        kube.list_objects(kube.NODE)  # what this process does shows in what it serves
        text = scrape()
        after = value(text, "controlplane_kube_requests_total", verb="list", outcome="ok")
        assert (after or 0) == (before or 0) + 1
        assert "controlplane_units" not in text  # scrape-time gauges are web's alone
    finally:
        server.shutdown()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("session_worker_paused")
def test_the_worker_serves_what_its_pool_did(cluster, tmp_path):
    port = free_port()
    worker = start_worker(
        "metered",
        WORKER_METRICS_PORT=str(port),
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
    )
    tenant = TenantFactory()
    try:
        PackageFactory(article=True)
        orders.create_unit(
            tenant=tenant, operation_id="w-1", name="w-1", package_id=ARTICLE_PACKAGE_ID, image="x"
        )
        deadline = time.monotonic() + 30
        created = None
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                created = value(
                    r.read().decode(),
                    "controlplane_kube_requests_total",
                    verb="create",
                    outcome="ok",
                )
            if created and created >= 3:  # GPUUnit, claim and pod of the unit
                break
            time.sleep(0.2)
        assert (created or 0) >= 3
    finally:
        stop_worker(worker)
        remove_namespace_objects(tenant.namespace)


def test_each_cluster_shows_whether_it_is_reachable_and_cordoned(client):
    labels = {"cluster": "default", "region": "default"}
    text = client.get("/metrics").content.decode()
    assert value(text, "controlplane_cluster_cordoned", **labels) == 0
    assert value(text, "controlplane_cluster_reachable", **labels) is None  # never listed
    InventorySnapshot.objects.create(pk=1, as_of=timezone.now(), document="{}")
    Cluster.objects.filter(name="default").update(cordoned=True)
    text = client.get("/metrics").content.decode()
    assert value(text, "controlplane_cluster_cordoned", **labels) == 1
    assert value(text, "controlplane_cluster_reachable", **labels) == 1
