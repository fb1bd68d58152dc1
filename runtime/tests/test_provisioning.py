"""Create to Running to Terminated through the API, a real Celery worker and the simulated
cluster; failures that must end Pending or Failed with a reason the customer can read."""

from __future__ import annotations

import jsonschema
import kubernetes_validate
import pytest

from catalog.tests.factories import PackageFactory
from runtime.models import GPUUnit, Operation
from runtime.tests.helpers import remove_namespace_objects, unit_objects, wait_for_phase
from runtime.tests.test_manifests import CRD

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


@pytest.fixture(autouse=True)
def _free_devices_after(tenant):
    yield
    remove_namespace_objects(tenant.namespace)


def order(client, name: str, package: str = "gpu-rtx3080-2x-cpu10-mem40g", **extra):
    body = {
        "operationID": f"op-{name}",
        "name": name,
        "packageID": package,
        "image": "python:3.12",
        **extra,
    }
    return client.post("/api/v1/gpu-units", body, format="json")


def test_unit_runs_with_allocated_devices_then_terminates(auth_client, tenant):
    PackageFactory(article=True)
    response = order(auth_client, "demo-instance")
    assert response.status_code == 201
    assert response.json()["data"]["phase"] == "Accepted"
    unit = wait_for_phase(GPUUnit.objects.get(), "Running")

    body = auth_client.get("/api/v1/gpu-units/demo-instance").json()["data"]
    assert body["phase"] == "Running"
    assert body["draStatus"]["allocated"] is True
    assert len(body["draStatus"]["devices"]) == 2
    objects = unit_objects(unit)
    claim, pod, custom = objects["claim"], objects["pod"], objects["gpuunit"]
    allocated = sorted(
        (r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]
    )
    assert sorted((d["pool"], d["device"]) for d in body["draStatus"]["devices"]) == allocated
    assert body["nodeName"] == pod["spec"]["nodeName"] == allocated[0][0]

    assert claim["metadata"]["ownerReferences"][0]["uid"] == custom["metadata"]["uid"]
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert (exactly["deviceClassName"], exactly["count"]) == ("nvidia-rtx-3080", 2)
    container = pod["spec"]["containers"][0]
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimName": "unit-demo-instance-gpu"}
    ]
    assert container["resources"]["claims"] == [{"name": "gpu", "request": "gpu"}]
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert "nvidia.com/gpu" not in str(pod)
    for built_in in (claim, pod):
        kubernetes_validate.validate(built_in, "1.34.0", strict=False)
    jsonschema.validate(custom, CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert custom["status"]["phase"] == "Running"
    assert custom["status"]["dra"]["allocated"] is True

    events = [
        e["reason"]
        for e in auth_client.get("/api/v1/gpu-units/demo-instance/events").json()["data"]
    ]
    assert events[:2] == ["Accepted", "Provisioning"]
    assert {"Provisioned", "Allocated", "Running"} <= set(events)

    assert auth_client.delete("/api/v1/gpu-units/demo-instance").status_code == 202
    assert auth_client.delete("/api/v1/gpu-units/demo-instance").status_code == 202
    unit = wait_for_phase(unit, "Terminated")
    assert unit_objects(unit) == {"gpuunit": None, "claim": None, "pod": None}
    operations = Operation.objects.order_by("id")
    assert [(o.kind, o.status) for o in operations] == [
        ("create", "succeeded"),
        ("delete", "succeeded"),
    ]
    replay = order(auth_client, "demo-instance")
    assert replay.status_code == 200
    assert replay.json()["data"]["phase"] == "Terminated"


def test_unplaceable_package_is_pending_with_no_matching_devices(auth_client):
    # 9 RTX 3080 per unit: more than any node has.
    PackageFactory(id="gpu-rtx3080-9x", spec_name="too-big", gpu=9, count=9)
    order(auth_client, "too-big", package="gpu-rtx3080-9x")
    unit = wait_for_phase(GPUUnit.objects.get(), "Pending", reason="NoMatchingDevices")
    assert "cannot allocate all claims" in unit.message


def test_missing_device_class_is_pending_with_device_class_not_found(auth_client):
    PackageFactory(
        id="gpu-ghost-1x", spec_name="ghost", gpu=1, count=1, device_class_name="nvidia-b200"
    )
    order(auth_client, "ghost", package="gpu-ghost-1x")
    unit = wait_for_phase(GPUUnit.objects.get(), "Pending", reason="DeviceClassNotFound")
    assert "nvidia-b200" in unit.message


def test_cluster_quota_rejection_fails_the_unit_and_leaves_nothing_behind(auth_client, tenant):
    """Someone ran a pod in the tenant's namespace outside the control plane: the API's own
    pre-check passes, the namespace's ResourceQuota (160 CPU) refuses the unit's pod."""
    from controlplane import kube
    from runtime.control.provisioning import ensure_tenant_namespace

    ensure_tenant_namespace(tenant)
    kube.create(
        kube.POD,
        tenant.namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "squatter"},
            "spec": {
                # The tenant namespace enforces Pod Security "restricted".
                "securityContext": {
                    "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {
                            "requests": {"cpu": "155", "memory": "1Gi"},
                            "limits": {"cpu": "155", "memory": "1Gi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }
                ],
            },
        },
    )
    PackageFactory(article=True)
    order(auth_client, "over-quota")
    unit = wait_for_phase(GPUUnit.objects.get(), "Failed")
    assert unit.reason == "QuotaExceeded"
    assert "exceeded quota" in unit.message
    assert "requests.cpu" in unit.message
    assert unit_objects(unit) == {"gpuunit": None, "claim": None, "pod": None}
    operation = Operation.objects.get()
    assert (operation.status, operation.error_code) == ("failed", "QuotaExceeded")
