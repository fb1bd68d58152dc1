"""Tenant storages through the API, a real Celery worker and the simulated cluster: a claim per
storage, mounted by units (the seed runtime's README request verbatim), outliving them, never
deleted while mounted, within the tenant's storage quota; and what is refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.conf import settings

from catalog.tests.factories import PackageFactory
from controlplane import kube
from controlplane.kube.errors import TemporaryError
from runtime.control import volumes as storage_claims
from runtime.models import GPUStorage, GPUUnit
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase
from tenancy import webhooks
from tenancy.models import WebhookDelivery
from tenancy.tests.factories import TenantFactory
from tests.endpoints import EndpointTest, client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]
DEV_GATEWAY = Path(__file__).resolve().parents[2] / "k8s" / "components" / "dev-gateway"
# The seed runtime's README request, verbatim.
SEED_REQUEST = {
    "operationID": "unit-demo-001",
    "name": "demo-instance",
    "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
    "image": "python:3.12",
    "template": {"ports": [{"name": "http", "port": 8080}]},
    "access": {"primaryPort": "http", "scheme": "http"},
    "storageMounts": [{"name": "model-cache", "mountPath": "/data"}],
}


@pytest.fixture(autouse=True)
def _setup(cluster, tenant):
    cluster.apply_manifests(DEV_GATEWAY)  # the default StorageClass `standard`
    PackageFactory(article=True)
    yield
    remove_namespace_objects(tenant.namespace)
    for name in [
        c["metadata"]["name"]
        for c in kube.list_objects(kube.PERSISTENTVOLUMECLAIM, namespace=tenant.namespace)
    ]:
        kube.delete(kube.PERSISTENTVOLUMECLAIM, tenant.namespace, name)


def wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := predicate():
            return result
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def create_storage(client, name="model-cache", **extra) -> dict:
    response = client.post(
        "/api/v1/gpu-storages", {"name": name, "size": "50Gi", **extra}, format="json"
    )
    assert response.status_code == 201, response.json()
    claim = wait_for(
        lambda: kube.get(
            kube.PERSISTENTVOLUMECLAIM,
            GPUStorage.objects.get(name=name).tenant.namespace,
            f"storage-{name}",
        ),
        f"the claim of {name}",
    )
    return claim


def test_the_seed_request_mounts_its_storage_which_outlives_the_unit(auth_client, tenant):
    claim = create_storage(auth_client)
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["storageClassName"] == "standard"  # the cluster's default, as written

    response = auth_client.post("/api/v1/gpu-units", SEED_REQUEST, format="json")
    assert response.status_code == 201, response.json()
    unit = wait_for_phase(GPUUnit.objects.get(name="demo-instance"), "Running")
    pod = kube.get(kube.POD, tenant.namespace, "unit-demo-instance")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["storage-model-cache"]["persistentVolumeClaim"] == {
        "claimName": "storage-model-cache"
    }
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "20Gi"}  # half of 40Gi
    mounts = {m["mountPath"]: m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {"/data": "storage-model-cache", "/dev/shm": "dshm"}
    assert unit.storage_mounts == [{"name": "model-cache", "mountPath": "/data", "readOnly": False}]

    storage_claims.sync_storages(settings.CLUSTER_NAME)
    shown = auth_client.get("/api/v1/gpu-storages/model-cache").json()["data"]
    assert (shown["phase"], shown["mountedBy"]) == ("Bound", ["demo-instance"])
    listed = auth_client.get("/api/v1/gpu-storages").json()["data"]
    assert [(s["name"], s["mountedBy"]) for s in listed] == [("model-cache", ["demo-instance"])]

    refused = auth_client.delete("/api/v1/gpu-storages/model-cache")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "storage_in_use"
    second = {**SEED_REQUEST, "operationID": "again", "name": "second"}
    taken = auth_client.post("/api/v1/gpu-units", second, format="json")
    assert (taken.status_code, taken.json()["error"]["code"]) == (409, "storage_in_use")

    assert auth_client.delete("/api/v1/gpu-units/demo-instance").status_code == 202
    wait_for_phase(unit, "Terminated")
    claim = kube.get(kube.PERSISTENTVOLUMECLAIM, tenant.namespace, "storage-model-cache")
    assert claim["status"]["phase"] == "Bound"  # the data stays
    assert auth_client.post("/api/v1/gpu-units", second, format="json").status_code == 201
    wait_for_phase(GPUUnit.objects.get(name="second"), "Running")
    assert auth_client.delete("/api/v1/gpu-units/second").status_code == 202
    wait_for_phase(GPUUnit.objects.get(name="second"), "Terminated")

    deleted = auth_client.delete("/api/v1/gpu-storages/model-cache")
    assert (deleted.status_code, deleted.json()["data"]["phase"]) == (202, "Terminating")
    wait_for(lambda: not GPUStorage.objects.filter(name="model-cache").exists(), "the deletion")
    assert kube.get(kube.PERSISTENTVOLUMECLAIM, tenant.namespace, "storage-model-cache") is None
    assert auth_client.get("/api/v1/gpu-storages/model-cache").status_code == 404


@pytest.mark.usefixtures("session_worker_paused")
def test_a_deletion_committed_while_the_claim_is_being_made_stays_deleted(
    auth_client, tenant, monkeypatch
):
    """The worker read the storage, then asked the cluster for its claim; the storage's
    deletion committed in between. What the worker then saw of the claim must not write over
    Terminating (which would leave the storage, its claim and its delete task's guard behind):
    storage phases move by compare-and-set, as units' do."""
    response = auth_client.post(
        "/api/v1/gpu-storages", {"name": "racing", "size": "1Gi"}, format="json"
    )
    assert response.status_code == 201, response.json()
    storage = GPUStorage.objects.get(name="racing")
    create_or_adopt = kube.create_or_adopt

    def deleted_meanwhile(*args, **kwargs):
        assert auth_client.delete("/api/v1/gpu-storages/racing").status_code == 202
        return create_or_adopt(*args, **kwargs)

    monkeypatch.setattr(kube, "create_or_adopt", deleted_meanwhile)
    storage_claims.provision_storage(storage.pk)  # the worker's half, with the deletion inside
    monkeypatch.undo()
    storage.refresh_from_db()
    assert storage.phase == "Terminating"
    assert kube.get(kube.PERSISTENTVOLUMECLAIM, tenant.namespace, "storage-racing") is not None

    storage_claims.sync_storages(
        settings.CLUSTER_NAME
    )  # beat's pass finds it Terminating too, and leaves it so
    storage.refresh_from_db()
    assert storage.phase == "Terminating"

    def deletion_finished() -> bool:
        try:
            storage_claims.finish_storage_deletion(storage.pk)
        except TemporaryError:
            return False
        return True

    wait_for(deletion_finished, "the claim to be deleted")
    assert not GPUStorage.objects.filter(pk=storage.pk).exists()
    assert kube.get(kube.PERSISTENTVOLUMECLAIM, tenant.namespace, "storage-racing") is None


def test_a_unit_whose_storage_cannot_bind_is_pending_storage_not_bound(
    auth_client, tenant, settings
):
    settings.STORAGE_CLASSES = ["no-such-class"]  # offered by ops, missing from the cluster
    create_storage(auth_client, name="nowhere", storageClass="no-such-class")
    body = {**SEED_REQUEST, "storageMounts": [{"name": "nowhere", "mountPath": "/data"}]}
    assert auth_client.post("/api/v1/gpu-units", body, format="json").status_code == 201
    wait_for_phase(GPUUnit.objects.get(name="demo-instance"), "Pending", reason="StorageNotBound")


@pytest.mark.parametrize(
    ("mounts", "field"),
    [
        ([{"name": "missing", "mountPath": "/data"}], "storageMounts[0].name"),
        ([{"name": "theirs", "mountPath": "/data"}], "storageMounts[0].name"),
        ([{"name": "model-cache", "mountPath": "/"}], "storageMounts[0].mountPath"),
        ([{"name": "model-cache", "mountPath": "data"}], "storageMounts[0].mountPath"),
        ([{"name": "model-cache", "mountPath": "/dev/shm"}], "storageMounts[0].mountPath"),
        (
            [
                {"name": "model-cache", "mountPath": "/a"},
                {"name": "model-cache", "mountPath": "/b"},
            ],
            "storageMounts[1].name",
        ),
        (
            [{"name": "model-cache", "mountPath": "/a", "readOnly": "yes"}],
            "storageMounts[0].readOnly",
        ),
    ],
)
def test_bad_mounts_are_400_naming_the_field_and_create_nothing(auth_client, mounts, field):
    create_storage(auth_client)
    other = client_for(TenantFactory())
    assert (
        other.post(
            "/api/v1/gpu-storages", {"name": "theirs", "size": "1Gi"}, format="json"
        ).status_code
        == 201
    )
    response = auth_client.post(
        "/api/v1/gpu-units", {**SEED_REQUEST, "storageMounts": mounts}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["details"]["fields"]
    assert not GPUUnit.objects.exists()


class TestStorageCreate(EndpointTest):
    method = "post"
    path = "/api/v1/gpu-storages"

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"name": "Bad Name", "size": "1Gi"}, "name"),
            ({"name": "a" * 56, "size": "1Gi"}, "name"),
            ({"name": "ok", "size": "lots"}, "size"),
            ({"name": "ok", "size": "0"}, "size"),
            ({"name": "ok", "size": 10}, "size"),
            ({"name": "ok", "size": "1Gi", "accessMode": "Sometimes"}, "accessMode"),
            ({"name": "ok", "size": "1Gi", "storageClass": "Not_A_Class"}, "storageClass"),
            # Not on ops' list (STORAGE_CLASSES): any DNS name was accepted before.
            ({"name": "ok", "size": "1Gi", "storageClass": "premium-nvme"}, "storageClass"),
            ({"name": "ok", "size": "1Gi", "extra": True}, "extra"),
        ],
    )
    def test_bad_input_is_400_naming_the_field(self, auth_client, body, field):
        error = self.get_error_response(auth_client, data=body, status=400, code="invalid_request")
        assert field in error["details"]["fields"]
        assert not GPUStorage.objects.exists()

    def test_a_taken_name_is_409(self, auth_client):
        self.get_success_response(auth_client, data={"name": "a", "size": "1Gi"}, status=201)
        self.get_error_response(
            auth_client, data={"name": "a", "size": "2Gi"}, status=409, code="storage_conflict"
        )

    def test_the_storage_quota_size_and_count(self):
        tenant = TenantFactory(quota_storage="100Gi", quota_storages=2)
        client = client_for(tenant)
        self.get_success_response(client, data={"name": "a", "size": "60Gi"}, status=201)
        error = self.get_error_response(
            client, data={"name": "b", "size": "50Gi"}, status=409, code="quota_exceeded"
        )
        assert error["details"]["limit"] == "requests.storage"
        assert error["details"]["largerThanQuota"] is False
        error = self.get_error_response(
            client, data={"name": "b", "size": "200Gi"}, status=409, code="quota_exceeded"
        )
        assert error["details"]["largerThanQuota"] is True
        self.get_success_response(client, data={"name": "b", "size": "40Gi"}, status=201)
        error = self.get_error_response(
            client, data={"name": "c", "size": "1Mi"}, status=409, code="quota_exceeded"
        )
        assert error["details"]["limit"] == "persistentvolumeclaims"
        assert GPUStorage.objects.filter(tenant=tenant).count() == 2

    def test_statements_are_the_baseline(self, auth_client):
        auth_client.get("/api/v1/gpu-storages")
        self.assert_statement_count(auth_client, data={"name": "a", "size": "1Gi"})


class TestStorageList(EndpointTest):
    path = "/api/v1/gpu-storages"

    def test_statements_are_the_baseline_whatever_the_count(self, auth_client, tenant):
        for name in ("a", "b", "c"):
            auth_client.post(self.path, {"name": name, "size": "1Gi"}, format="json")
        self.assert_statement_count(auth_client)


class TestStorageDetail(EndpointTest):
    path = "/api/v1/gpu-storages/{name}"

    def test_another_tenant_s_storage_is_404(self, auth_client):
        auth_client.post("/api/v1/gpu-storages", {"name": "a", "size": "1Gi"}, format="json")
        self.get_error_response(client_for(TenantFactory()), status=404, code="not_found", name="a")

    def test_statements_are_the_baseline(self, auth_client):
        auth_client.post("/api/v1/gpu-storages", {"name": "a", "size": "1Gi"}, format="json")
        self.assert_statement_count(auth_client, name="a")


class TestStorageDelete(EndpointTest):
    method = "delete"
    path = "/api/v1/gpu-storages/{name}"

    def test_statements_are_the_baseline(self, auth_client):
        auth_client.post("/api/v1/gpu-storages", {"name": "a", "size": "1Gi"}, format="json")
        auth_client.get("/api/v1/gpu-storages")
        self.assert_statement_count(auth_client, name="a")


def test_a_volumes_phases_are_webhook_events_in_order(auth_client, tenant, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    # Nothing listens on port 9: the deliveries are written and refused, which is all this
    # test reads (tests/test_webhooks.py receives them).
    hook = webhooks.create_endpoint(
        tenant=tenant, url="http://127.0.0.1:9/hook", events=["storage.phase_changed"]
    )
    create_storage(auth_client, name="scratch")  # Pending: it binds with its first unit
    request = {**SEED_REQUEST, "storageMounts": [{"name": "scratch", "mountPath": "/data"}]}
    assert auth_client.post("/api/v1/gpu-units", request, format="json").status_code == 201
    unit = wait_for_phase(GPUUnit.objects.get(name="demo-instance"), "Running")
    storage_claims.sync_storages(settings.CLUSTER_NAME)
    assert GPUStorage.objects.get(name="scratch").phase == "Bound"
    assert auth_client.delete("/api/v1/gpu-units/demo-instance").status_code == 202
    wait_for_phase(unit, "Terminated")
    assert auth_client.delete("/api/v1/gpu-storages/scratch").status_code == 202
    wait_for(lambda: not GPUStorage.objects.filter(name="scratch").exists(), "the deletion")
    events = [d.payload for d in WebhookDelivery.objects.filter(endpoint=hook).order_by("id")]
    assert [(e["data"]["previousPhase"], e["data"]["phase"]) for e in events] == [
        ("Pending", "Bound"),
        ("Bound", "Terminating"),
        ("Terminating", "Deleted"),
    ]
    assert {e["subject"] for e in events} == {"gpu-storages/scratch"}
    assert {e["type"] for e in events} == {"io.lokiwager.gpu.storage.phase_changed"}
