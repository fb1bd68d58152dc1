"""Auto-stop: a unit ordered with stopAfter is stopped by beat once it ran that long; the
maximums ops set per package and per tenant bound what customers may ask for."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from catalog.tests.factories import PackageFactory
from conftest import start_beat, stop_worker
from runtime.models import GPUUnit, Operation, OperationStatus
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase
from tests.endpoints import client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


@pytest.fixture(autouse=True)
def _cleanup(tenant, cluster):
    yield
    remove_namespace_objects(tenant.namespace)


def order(client, package, **extra):
    return client.post(
        "/api/v1/gpu-units",
        {"operationID": "auto-1", "name": "brief", "packageID": package.id, "image": "busybox"}
        | extra,
        format="json",
    )


def test_beat_stops_a_unit_whose_stop_after_ran_out(tenant, tmp_path):
    package = PackageFactory()
    client = client_for(tenant)
    response = order(client, package, stopAfter="2s")
    assert response.status_code == 201, response.json()
    data = response.json()["data"]
    assert data["stopAfter"] == "2s"
    assert data["stopsAt"] is not None
    unit = wait_for_phase(GPUUnit.objects.get(name="brief"), "Running")
    stops_at = unit.stops_at
    beat_started = timezone.now()
    beat = start_beat(tmp_path, AUTO_STOP_INTERVAL_SECONDS="0.5")
    try:
        deadline = time.monotonic() + 30
        while not Operation.objects.filter(unit=unit, kind="stop").exists():
            assert time.monotonic() < deadline, "beat did not stop the unit"
            time.sleep(0.2)
    finally:
        stop_worker(beat)
    unit = wait_for_phase(unit, "Stopped")
    stop = Operation.objects.get(unit=unit, kind="stop")
    assert stop.operation_id == f"@autostop-{unit.uid}-1"
    assert stop.status == OperationStatus.SUCCEEDED
    auto = unit.events.get(reason="AutoStop")
    assert "stopAfter 2s ran out" in auto.message
    # It ran its 2 s, and beat stopped it within a few seconds of the later of its stop time
    # and beat's start (a beat process takes a while to start on a busy machine).
    assert (auto.first_seen - unit.started_at).total_seconds() >= 2.0
    assert (auto.first_seen - max(stops_at, beat_started)).total_seconds() < 10
    assert client.get("/api/v1/gpu-units/brief").json()["data"]["stopsAt"] is None
    # Started again, it has its 2 s again: stopsAt moves with the start.
    started = client.post("/api/v1/gpu-units/brief/start", {"operationID": "again"}, format="json")
    assert started.status_code == 202, started.json()
    unit = wait_for_phase(unit, "Running")
    assert (unit.stops_at - unit.started_at).total_seconds() == 2


def test_the_smaller_maximum_of_package_and_tenant_applies(tenant):
    package = PackageFactory(max_stop_after="8h")
    type(tenant).objects.filter(pk=tenant.pk).update(max_stop_after="2h")
    client = client_for(tenant)
    refused = order(client, package, stopAfter="3h")
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["details"]["maximum"] == "2h"
    assert error["details"]["setBy"] == f"tenant {tenant.slug}"
    assert "exceeds the maximum of 2h" in error["details"]["fields"]["stopAfter"][0]
    assert not GPUUnit.objects.exists()
    # Left out, the maximum applies; asked for within it, as asked (normalised).
    response = order(client, package)
    assert response.status_code == 201, response.json()
    assert response.json()["data"]["stopAfter"] == "2h"
    unit = wait_for_phase(GPUUnit.objects.get(name="brief"), "Running")
    etag = client.get("/api/v1/gpu-units/brief").json()["data"]["etag"]
    over = client.patch(
        "/api/v1/gpu-units/brief",
        {"operationID": "longer", "stopAfter": "2h1m"},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    assert over.status_code == 400
    assert over.json()["error"]["details"]["maximum"] == "2h"
    cleared = client.patch(
        "/api/v1/gpu-units/brief",
        {"operationID": "clear", "stopAfter": None},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    # Clearing it leaves the maximum: nothing changes.
    assert cleared.status_code == 200, cleared.json()
    assert cleared.json()["data"]["stopAfter"] == "2h"
    shorter = client.patch(
        "/api/v1/gpu-units/brief",
        {"operationID": "shorter", "stopAfter": "90m"},
        format="json",
        HTTP_IF_MATCH=etag,
    )
    assert shorter.status_code == 202, shorter.json()
    assert shorter.json()["data"]["stopAfter"] == "1h30m"
    unit.refresh_from_db()
    assert (unit.stops_at - unit.started_at).total_seconds() == 5400
    # The update replaces the pod; it is carried out before the test ends (a replacement made
    # after the cleanup would be left behind, holding devices).
    deadline = time.monotonic() + 30
    while Operation.objects.get(operation_id="shorter").status != OperationStatus.SUCCEEDED:
        assert time.monotonic() < deadline, "the update was not carried out"
        time.sleep(0.2)
    wait_for_phase(unit, "Running")
