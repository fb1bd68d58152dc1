"""A tenant's device quota per DeviceClass: checked at order time under the tenant lock,
shown by GET /quota, written into the tenant's ResourceQuota (which the simulated cluster
enforces as a real one does)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from catalog.tests.factories import PackageFactory
from controlplane import kube
from runtime import manifests
from runtime.control.provisioning import ensure_tenant_namespace
from runtime.models import GPUUnit, UnitPhase
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = pytest.mark.django_db

KEY = "nvidia-rtx-3080.deviceclass.resource.k8s.io/devices"


def order(client, name: str, package):
    return client.post(
        "/api/v1/gpu-units",
        {"operationID": name, "name": name, "packageID": package.id, "image": "busybox"},
        format="json",
    )


def test_orders_past_the_class_quota_are_refused_naming_it():
    tenant = TenantFactory(quota_devices={"nvidia-rtx-3080": 5})
    package = PackageFactory()  # 2 x nvidia-rtx-3080
    other = PackageFactory(device_class_name="nvidia-h100", gpu=4, count=4)
    client = client_for(tenant)
    assert order(client, "a", package).status_code == 201
    assert order(client, "b", package).status_code == 201
    refused = order(client, "c", package)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {
        "limit": KEY,
        "used": "4",
        "requested": "2",
        "hard": "5",
        "largerThanQuota": False,
    }
    assert not GPUUnit.objects.filter(name="c").exists()
    assert order(client, "d", other).status_code == 201  # another class: no limit
    # A stopped unit's claim still counts; a terminated one's does not.
    GPUUnit.objects.filter(name="a").update(phase=UnitPhase.STOPPED)
    assert order(client, "c", package).status_code == 409
    GPUUnit.objects.filter(name="a").update(phase=UnitPhase.TERMINATED)
    assert order(client, "c", package).status_code == 201
    quota = client.get("/api/v1/quota").json()["data"]
    assert quota["devices"] == {"nvidia-rtx-3080": {"hard": "5", "used": "4", "free": "1"}}


def test_a_package_larger_than_the_class_quota_says_so():
    tenant = TenantFactory(quota_devices={"nvidia-rtx-3080": 1})
    refused = order(client_for(tenant), "big", PackageFactory())
    assert refused.json()["error"]["details"]["largerThanQuota"] is True
    assert "larger than your whole quota" in refused.json()["error"]["message"]


def test_without_a_device_quota_quota_shows_no_devices(tenant, auth_client):
    assert "devices" not in auth_client.get("/api/v1/quota").json()["data"]


@pytest.mark.parametrize(
    "value",
    [["nvidia-h100"], {"Not A Class": 1}, {"nvidia-h100": -1}, {"nvidia-h100": 1.5}, {"x": True}],
)
def test_a_device_quota_must_map_classes_to_whole_numbers(value):
    tenant = TenantFactory.build(quota_devices=value)
    with pytest.raises(ValidationError) as caught:
        tenant.full_clean()
    assert "quota_devices" in caught.value.message_dict


def test_the_resource_quota_carries_the_class_keys():
    quota = manifests.build_resource_quota(
        "ns", tenant="t", cpu="1", memory="1Gi", claims=1, devices={"nvidia-h100": 8}
    )
    assert quota["spec"]["hard"]["nvidia-h100.deviceclass.resource.k8s.io/devices"] == "8"


@pytest.mark.django_db(transaction=True)
def test_the_tenant_namespace_quota_follows_the_device_quota(cluster):
    tenant = TenantFactory(quota_devices={"nvidia-rtx-3080": 4, "nvidia-h100": 8})
    ensure_tenant_namespace(tenant)
    hard = kube.get(kube.RESOURCEQUOTA, tenant.namespace, manifests.QUOTA_NAME)["spec"]["hard"]
    assert hard[KEY] == "4"
    assert hard["nvidia-h100.deviceclass.resource.k8s.io/devices"] == "8"
    tenant.quota_devices = {"nvidia-rtx-3080": 2}
    ensure_tenant_namespace(tenant)
    hard = kube.get(kube.RESOURCEQUOTA, tenant.namespace, manifests.QUOTA_NAME)["spec"]["hard"]
    assert hard[KEY] == "2"
    assert "nvidia-h100.deviceclass.resource.k8s.io/devices" not in hard  # taken off
    assert hard["requests.cpu"] == tenant.quota_cpu
