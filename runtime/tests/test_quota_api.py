"""GET /api/v1/quota: the tenant's quota, what its live units hold and what is left; a quota
refusal has its own code; availability says when a package can never fit the quota."""

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from runtime import orders
from tenancy.tests.factories import TenantFactory
from tests.endpoints import EndpointTest, client_for

pytestmark = pytest.mark.django_db


class TestQuota(EndpointTest):
    path = "/api/v1/quota"

    def test_quota_usage_and_headroom(self):
        tenant = TenantFactory(quota_cpu="32", quota_memory="64Gi", quota_claims=4)
        PackageFactory(article=True)  # 10 CPU, 40Gi
        orders.create_unit(
            tenant=tenant, operation_id="o", name="a", package_id=ARTICLE_PACKAGE_ID, image="b"
        )
        data = self.get_success_response(client_for(tenant)).json()["data"]
        assert data == {
            "cpu": {"hard": "32", "used": "10", "free": "22"},
            "memory": {"hard": "64Gi", "used": "40Gi", "free": "24Gi"},
            "claims": {"hard": "4", "used": "1", "free": "3"},
            "limits": {
                "sshKeys": {"hard": "32", "used": "0", "free": "32"},
                "secrets": {"hard": "64", "used": "0", "free": "64"},
                "nodePorts": {"hard": "32", "used": "0", "free": "32"},
                "loadBalancers": {"hard": "8", "used": "0", "free": "8"},
                "logFollowers": {"hard": "4", "used": "0", "free": "4"},
                # The package's ephemeral storage (the default) for its pod, to run.
                "ephemeralStorage": {"hard": "1Ti", "used": "20Gi", "free": "1004Gi"},
                "storageClasses": [],
            },
            # Ordered, not yet run: nothing used.
            "currency": "USD",
            "costToDate": "0.000000",
            "costThisMonth": "0.000000",
            "committed": "0.000000",
        }

    def test_needs_a_key(self, api_client):
        self.get_error_response(api_client, status=401, code="unauthenticated")

    def test_statements_are_the_baseline(self, auth_client):
        auth_client.get(self.path)  # warm the key's last-used stamp
        self.assert_statement_count(auth_client)  # the key and its tenant: counters included


def test_a_quota_refusal_is_quota_exceeded_not_capacity():
    tenant = TenantFactory(quota_cpu="15")
    PackageFactory(article=True)
    client = client_for(tenant)
    body = {"operationID": "a", "name": "a", "packageID": ARTICLE_PACKAGE_ID, "image": "b"}
    assert client.post("/api/v1/gpu-units", body, format="json").status_code == 201
    response = client.post(
        "/api/v1/gpu-units", {**body, "operationID": "b", "name": "b"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "quota_exceeded"


def test_availability_says_when_a_package_is_larger_than_the_quota():
    tenant = TenantFactory(quota_memory="32Gi")  # the package needs 40Gi
    PackageFactory(article=True)
    packages = client_for(tenant).get("/api/v1/packages").json()["data"]
    (availability,) = [p["availability"] for p in packages]
    assert availability["placeableNow"] == 0
    assert availability["reason"] == (
        "This package is larger than your whole quota: it needs 40Gi memory of the 32Gi you "
        "have. Pick a smaller package, or ask us to raise your quota."
    )


def test_availability_says_when_the_quota_is_used_up_but_would_fit():
    from inventory.models import PackageAvailability

    tenant = TenantFactory(quota_cpu="10")
    PackageFactory(article=True)
    PackageAvailability.objects.create(
        package_id=ARTICLE_PACKAGE_ID, placeable=3, free_devices=6, reason=""
    )
    client = client_for(tenant)
    body = {"operationID": "a", "name": "a", "packageID": ARTICLE_PACKAGE_ID, "image": "b"}
    client.post("/api/v1/gpu-units", body, format="json")
    (availability,) = [p["availability"] for p in client.get("/api/v1/packages").json()["data"]]
    assert availability["placeableNow"] == 0
    assert availability["reason"] == (
        "Not enough quota left for this package: it needs 10 CPU, and 10 of 10 are in use. "
        "Delete a unit or pick a smaller package."
    )


def test_an_order_larger_than_the_whole_quota_says_so():
    tenant = TenantFactory(quota_memory="32Gi")  # the package needs 40Gi
    PackageFactory(article=True)
    body = {"operationID": "a", "name": "a", "packageID": ARTICLE_PACKAGE_ID, "image": "b"}
    response = client_for(tenant).post("/api/v1/gpu-units", body, format="json")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert "larger than" in error["message"]
    assert error["details"]["largerThanQuota"] is True
