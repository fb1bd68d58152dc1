"""GET /api/v1/health against the real database, Redis and a real Celery worker."""

import threading
import time

import pytest
from django.test import override_settings

from controlplane import health
from devstack.services import free_port
from tests.endpoints import EndpointTest

pytestmark = pytest.mark.django_db


class TestHealth(EndpointTest):
    path = "/api/v1/health"

    def test_database_and_broker_up_without_a_key(self, api_client):
        checks = self.get_success_response(api_client).json()["data"]["checks"]
        assert checks["database"]["ok"] is True
        assert checks["broker"]["ok"] is True
        assert checks["database"]["latencyMs"] >= 0
        assert set(checks) == {"database", "broker", "cluster", "worker", "inventory", "observer"}

    def test_statements_are_the_baseline(self, api_client):
        # SELECT 1, then the clusters with the mirror's time and the last sync's error.
        self.assert_statement_count(api_client)


def test_health_is_degraded_but_ready_when_broker_is_down(api_client):
    port = free_port()
    with override_settings(CELERY_BROKER_URL=f"redis://127.0.0.1:{port}/0"):
        response = api_client.get("/api/v1/health")
    assert response.status_code == 200
    data = response.json()["data"]
    assert data["status"] == "degraded"
    assert data["checks"]["broker"]["ok"] is False
    # The kind of failure, never its text: the public report names no host or port (issue 41).
    assert data["checks"]["broker"]["error"] == "ConnectionError"
    assert str(port) not in response.content.decode()


def test_worker_heartbeat_shows_in_health(api_client, celery_worker):
    from controlplane.tasks import heartbeat

    health._redis().delete(health.HEARTBEAT_KEY)
    assert api_client.get("/api/v1/health").json()["data"]["checks"]["worker"]["ok"] is False
    heartbeat.delay()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        worker = api_client.get("/api/v1/health").json()["data"]["checks"]["worker"]
        if worker["ok"]:
            break
        time.sleep(0.2)
    assert worker["ok"] is True
    assert worker["lastHeartbeat"]


def test_beat_schedule_runs_the_heartbeat():
    from controlplane.celery import app

    app.finalize()
    assert app.conf.beat_schedule["controlplane.heartbeat"]["task"] == "controlplane.heartbeat"


def test_health_reports_the_cluster_and_its_outage(api_client, cluster):
    checks = api_client.get("/api/v1/health").json()["data"]["checks"]
    assert checks["cluster"]["ok"] is True
    cluster.faults.unreachable = True
    try:
        response = api_client.get("/api/v1/health")
    finally:
        cluster.faults.unreachable = False
    assert response.status_code == 200  # the API keeps accepting work
    data = response.json()["data"]
    assert data["status"] == "degraded"
    assert data["checks"]["cluster"]["ok"] is False
    assert api_client.get("/api/v1/health").json()["data"]["checks"]["cluster"]["ok"] is True


def test_health_reports_the_inventory_age(api_client, cluster):
    from inventory.models import InventorySnapshot, SyncRun
    from inventory.sync import sync_inventory

    SyncRun.objects.all().delete()  # whatever earlier tests left: this one starts unsynced
    InventorySnapshot.objects.all().delete()

    assert api_client.get("/api/v1/health").json()["data"]["checks"]["inventory"] == {
        "ok": False,
        "lastSync": None,
        "clusters": [
            {
                "name": "default",
                "region": "default",
                "enabled": True,
                "cordoned": False,
                "health": "unknown",
            }
        ],
    }
    sync_inventory()
    inventory = api_client.get("/api/v1/health").json()["data"]["checks"]["inventory"]
    assert inventory["ok"] is True
    assert inventory["lastSync"]
    assert inventory["clusters"][0]["health"] == "reachable"


def test_redis_and_cluster_are_probed_at_the_same_time(api_client, monkeypatch):
    # Each probe waits until the other one has started: probed one after the other, both
    # would give up waiting and report the broken barrier.
    both_started = threading.Barrier(2, timeout=5)

    def waits_for_the_other() -> health.Check:
        both_started.wait()
        return health.Check(True, 0.0)

    monkeypatch.setattr(health, "check_broker", waits_for_the_other)
    monkeypatch.setattr(health, "check_cluster", waits_for_the_other)
    checks = api_client.get("/api/v1/health").json()["data"]["checks"]
    assert checks["broker"]["ok"] is True
    assert checks["cluster"]["ok"] is True
