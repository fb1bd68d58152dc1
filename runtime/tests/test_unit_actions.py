"""Stop, start, restart and update through the API, against the simulated cluster and a real
Celery worker (beat's reconcile is run by wait_for_phase, as the backstop would): what each
does to the unit's objects, its devices and the tenant's quota, and what each refuses."""

from __future__ import annotations

import pytest

from catalog.tests.factories import PackageFactory
from controlplane import kube
from inventory.sync import sync_inventory
from runtime import manifests
from runtime.models import GPUUnit, Operation, OperationStatus
from runtime.tests.helpers import (
    order_unit,
    remove_namespace_objects,
    unit_objects,
    wait_for_phase,
)
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]

WHOLE_NODE = "rtx3080-8x"  # every RTX 3080 of the sample topology's one RTX node


@pytest.fixture(autouse=True)
def _packages_and_cleanup(tenant, cluster):
    PackageFactory(id=WHOLE_NODE, gpu=8, count=8, cpu="8", memory="32Gi")
    PackageFactory(article=True)
    yield
    remove_namespace_objects(tenant.namespace)


def order(client, name: str, package: str = WHOLE_NODE, **extra) -> GPUUnit:
    return order_unit(client, name, package, operation_id=f"create-{name}", **extra)


def act(client, name: str, action: str, operation_id: str):
    return client.post(
        f"/api/v1/gpu-units/{name}/{action}", {"operationID": operation_id}, format="json"
    )


def devices_of(unit: GPUUnit) -> set[str]:
    unit.refresh_from_db()
    return {d["device"] for d in unit.dra["devices"]}


def free_rtx(operator) -> int:
    sync_inventory()
    data = operator.get("/api/v1/operator/inventory").json()["data"]
    return next(c["free"] for c in data["deviceClasses"] if c["name"] == "nvidia-rtx-3080")


def placeable(client, package: str) -> int:
    """How many units of the package fit now, as GET /packages says (after a sync)."""
    sync_inventory()
    return client.get(f"/api/v1/packages/{package}").json()["data"]["availability"]["placeableNow"]


def test_stop_frees_the_devices_for_another_unit_and_start_waits_for_them(tenant):
    client = client_for(tenant)
    operator = client_for(TenantFactory(is_operator=True))
    first = wait_for_phase(order(client, "first"), "Running")
    claim_uid = unit_objects(first)["claim"]["metadata"]["uid"]
    assert free_rtx(operator) == 0
    used = type(tenant).objects.get(pk=tenant.pk)

    response = act(client, "first", "stop", "stop-1")
    assert response.status_code == 202, response.json()
    operation = response.json()["data"]
    assert (operation["kind"], operation["operationID"], operation["unitName"]) == (
        "stop",
        "stop-1",
        "first",
    )
    assert response["Location"] == "/api/v1/operations/stop-1"
    first = wait_for_phase(first, "Stopped")
    objects = unit_objects(first)
    assert objects["pod"] is None
    assert objects["claim"]["metadata"]["uid"] == claim_uid  # kept, and deallocated
    assert "allocation" not in (objects["claim"].get("status") or {})
    assert objects["gpuunit"]["spec"]["runPolicy"] == "Stopped"
    assert first.dra["allocated"] is False
    assert free_rtx(operator) == 8
    assert placeable(client, WHOLE_NODE) == 1
    # The tenant's CPU and memory come back; the claim is still the unit's.
    stopped = type(tenant).objects.get(pk=tenant.pk)
    assert stopped.used_cpu_millicores == used.used_cpu_millicores - 8000
    assert stopped.used_memory_bytes == used.used_memory_bytes - 32 * 2**30
    assert stopped.used_claims == used.used_claims
    assert Operation.objects.get(operation_id="stop-1").status == OperationStatus.SUCCEEDED

    second = wait_for_phase(order(client, "second"), "Running")
    assert devices_of(second)
    assert placeable(client, WHOLE_NODE) == 0  # what a start of `first` would meet

    response = act(client, "first", "start", "start-1")
    assert response.status_code == 202, response.json()
    first = wait_for_phase(first, "Pending", reason="NoMatchingDevices")
    assert first.run_policy == "Running"

    client.delete("/api/v1/gpu-units/second")
    wait_for_phase(second, "Terminated")
    first = wait_for_phase(first, "Running")
    assert len(devices_of(first)) == 8
    assert unit_objects(first)["claim"]["metadata"]["uid"] == claim_uid
    reasons = [e.reason for e in first.events.order_by("id")]
    assert (
        reasons.index("StopRequested") < reasons.index("Stopped") < reasons.index("StartRequested")
    )
    phases = [reason for reason in reasons if not reason.startswith("Usage")]
    assert phases[-1] == "Running"
    # Billed from its new pod's start again (the usage entries sit beside the phases).
    assert "UsageStarted" in reasons[reasons.index("StartRequested") :]


def test_restart_replaces_the_pod_and_keeps_the_claim(tenant):
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "again", package="gpu-rtx3080-2x-cpu10-mem40g"), "Running")
    before = unit_objects(unit)
    response = act(client, "again", "restart", "restart-1")
    assert response.status_code == 202, response.json()
    # A retry of the same request is the same operation.
    replay = act(client, "again", "restart", "restart-1")
    assert replay.status_code == 200
    assert replay["Idempotent-Replayed"] == "true"
    unit = wait_for_phase(unit, "Running")
    unit = wait_for_phase(unit, "Running")
    after = unit_objects(unit)
    assert after["pod"]["metadata"]["uid"] != before["pod"]["metadata"]["uid"]
    assert after["claim"]["metadata"]["uid"] == before["claim"]["metadata"]["uid"]
    assert Operation.objects.filter(unit=unit, kind="restart").count() == 1
    assert unit.observed_generation == unit.generation == 2
    # Another operationID for the same action is a new restart; a different action under a
    # used operationID is a conflict.
    assert act(client, "again", "stop", "restart-1").json()["error"]["code"] == (
        "operation_conflict"
    )


def test_each_action_is_refused_where_it_makes_no_sense(tenant):
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "table", package="gpu-rtx3080-2x-cpu10-mem40g"), "Running")
    response = act(client, "table", "start", "start-running")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid_state"
    assert response.json()["error"]["details"]["phase"] == "Running"
    assert act(client, "table", "stop", "stop-a").status_code == 202
    unit = wait_for_phase(unit, "Stopped")
    for action in ("stop", "restart"):
        refused = act(client, "table", action, f"{action}-stopped")
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "invalid_state", refused.json()
    assert not Operation.objects.filter(operation_id__endswith="-stopped").exists()
    assert act(client, "nope", "stop", "stop-nope").status_code == 404
    bad = act(client, "table", "start", "has space")
    assert bad.status_code == 400
    assert "operationID" in bad.json()["error"]["details"]["fields"]
    client.delete("/api/v1/gpu-units/table")
    unit = wait_for_phase(unit, "Terminated")
    assert act(client, "table", "start", "start-gone").json()["error"]["code"] == "invalid_state"


def test_an_open_operation_refuses_another(tenant, session_worker_paused):
    client = client_for(tenant)
    unit = order(client, "busy", package="gpu-rtx3080-2x-cpu10-mem40g")
    # The create is still open (no worker takes it): every action waits for it.
    refused = act(client, "busy", "stop", "stop-busy")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "operation_in_progress"
    assert refused.json()["error"]["details"] == {"operationID": "create-busy", "kind": "create"}
    assert unit.operations.count() == 1


def test_an_update_with_the_current_etag_replaces_the_pod_and_keeps_the_claim(tenant):
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "edit", package="gpu-rtx3080-2x-cpu10-mem40g"), "Running")
    shown = client.get("/api/v1/gpu-units/edit")
    etag = shown.json()["data"]["etag"]
    assert shown["ETag"] == etag
    assert shown.json()["data"]["generation"] == 1
    before = unit_objects(unit)
    url = "/api/v1/gpu-units/edit"
    patch = {
        "operationID": "edit-1",
        "image": "python:3.13",
        "template": {"env": [{"name": "MODE", "value": "serve"}]},
    }

    missing = client.patch(url, patch, format="json")
    assert missing.status_code == 428
    assert missing.json()["error"]["code"] == "precondition_required"
    stale = client.patch(url, patch, format="json", HTTP_IF_MATCH='"0-stale"')
    assert stale.status_code == 412
    assert stale.json()["error"]["code"] == "precondition_failed"
    immutable = client.patch(
        url, {**patch, "packageID": "other"}, format="json", HTTP_IF_MATCH=etag
    )
    assert immutable.status_code == 400
    assert immutable.json()["error"]["code"] == "immutable_field"
    assert not Operation.objects.filter(kind="update").exists()
    unit.refresh_from_db()
    assert unit.generation == 1
    assert unit.image == "busybox"

    response = client.patch(url, patch, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 202, response.json()
    data = response.json()["data"]
    assert data["generation"] == 2
    assert data["etag"] != etag
    assert response.json()["meta"]["operationID"] == "edit-1"
    replay = client.patch(url, patch, format="json", HTTP_IF_MATCH=etag)
    assert replay.status_code == 200
    assert replay["Idempotent-Replayed"] == "true"
    assert client.patch(url, patch, format="json", HTTP_IF_MATCH=etag).status_code == 200

    unit = wait_for_phase(unit, "Running")
    unit = wait_for_phase(unit, "Running")
    after = unit_objects(unit)
    assert after["pod"]["metadata"]["uid"] != before["pod"]["metadata"]["uid"]
    container = after["pod"]["spec"]["containers"][0]
    assert container["image"] == "python:3.13"
    assert {"name": "MODE", "value": "serve"} in container["env"]
    assert after["claim"]["metadata"]["uid"] == before["claim"]["metadata"]["uid"]
    assert after["gpuunit"]["spec"]["image"] == "python:3.13"
    assert unit.observed_generation == 2
    shown = client.get(url).json()["data"]
    assert shown["observedGeneration"] == shown["generation"] == 2
    update = next(e for e in unit.events.order_by("id") if e.reason == "Updating")
    assert "image" in update.message
    assert "template.env" in update.message

    # Merge patch: null clears a field; the pod follows.
    cleared = client.patch(
        url,
        {"operationID": "edit-2", "template": None},
        format="json",
        HTTP_IF_MATCH=shown["etag"],
    )
    assert cleared.status_code == 202, cleared.json()
    assert cleared.json()["data"]["template"] == {}
    unit = wait_for_phase(unit, "Running")
    unit = wait_for_phase(unit, "Running")
    pod = unit_objects(unit)["pod"]
    assert {"name": "MODE", "value": "serve"} not in pod["spec"]["containers"][0]["env"]


def test_an_update_is_checked_as_an_order_is(tenant):
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "strict", package="gpu-rtx3080-2x-cpu10-mem40g"), "Running")
    etag = client.get("/api/v1/gpu-units/strict").json()["data"]["etag"]
    url = "/api/v1/gpu-units/strict"
    cases = {
        "image": {"image": "Not An Image"},
        "template.env[0].name": {"template": {"env": [{"name": "1BAD"}]}},
        "stopAfter": {"stopAfter": "soon"},
    }
    for index, (field, patch) in enumerate(cases.items()):
        response = client.patch(
            url, {"operationID": f"bad-{index}", **patch}, format="json", HTTP_IF_MATCH=etag
        )
        assert response.status_code == 400, (field, response.json())
        assert field in response.json()["error"]["details"]["fields"], response.json()
    unknown = client.patch(
        url, {"operationID": "bad-unknown", "gpu": 4}, format="json", HTTP_IF_MATCH=etag
    )
    assert unknown.json()["error"]["code"] == "immutable_field"
    assert not Operation.objects.filter(kind="update").exists()
    # A patch that changes nothing is recorded, succeeded at once, with no new generation.
    same = client.patch(
        url, {"operationID": "same", "image": "busybox"}, format="json", HTTP_IF_MATCH=etag
    )
    assert same.status_code == 200, same.json()
    assert Operation.objects.get(operation_id="same").status == OperationStatus.SUCCEEDED
    unit.refresh_from_db()
    assert unit.generation == 1
    assert unit_objects(unit)["pod"]["metadata"]["uid"] == unit.pod_k8s_uid


def test_the_gpuunit_says_when_the_cluster_caught_up(tenant):
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "gen", package="gpu-rtx3080-2x-cpu10-mem40g"), "Running")
    gpuunit = unit_objects(unit)["gpuunit"]
    assert gpuunit["status"]["observedGeneration"] == gpuunit["metadata"]["generation"]
    act(client, "gen", "stop", "stop-gen")
    unit = wait_for_phase(unit, "Stopped")
    wait_for_phase(unit, "Stopped")  # one more pass mirrors the status
    gpuunit = kube.get(kube.GPUUNIT, unit.namespace, unit.name)
    assert gpuunit["status"]["phase"] == "Stopped"
    assert gpuunit["metadata"]["generation"] == 2
    assert gpuunit["status"]["observedGeneration"] == 2
    assert kube.get(kube.POD, unit.namespace, manifests.pod_name_for("gen")) is None
