"""GET /api/v1/packages and /packages/{id}: active packages in the article's JSON shape with
the tenant's availability, in the envelope. Availability against a synced cluster is tested
in inventory/tests/test_sync.py."""

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from tests.endpoints import EndpointTest

pytestmark = pytest.mark.django_db


class TestPackageList(EndpointTest):
    path = "/api/v1/packages"

    def test_active_packages_in_article_shape(self, auth_client):
        PackageFactory(
            article=True,
            selectors=['device.driver == "gpu.nvidia.com"'],
            price="0.36",
            termination_grace_seconds=600,
        )
        PackageFactory(id="gpu-retired", spec_name="old", gpu=1, count=1, active=False)
        assert self.get_success_response(auth_client).json() == {
            "data": [
                {
                    "id": ARTICLE_PACKAGE_ID,
                    "specName": "gpu.rtx3080.2x.10c.40g",
                    "cpu": "10",
                    "memory": "40Gi",
                    "gpu": 2,
                    "allocation": {
                        "deviceClassName": "nvidia-rtx-3080",
                        "claimRequestName": "gpu",
                        "count": 2,
                        "selectors": ['device.driver == "gpu.nvidia.com"'],
                    },
                    "terminationGracePeriodSeconds": 600,
                    "price": {"hourly": "0.36", "currency": "USD"},
                    "interruptible": None,
                    "availability": {
                        "placeableNow": 0,
                        "freeDevices": 0,
                        "reason": "not in the inventory yet",
                        "asOf": None,
                        "stale": True,
                    },
                    "regions": [{"name": "default", "placeableNow": 0, "freeDevices": 0}],
                }
            ]
        }

    def test_packages_need_an_api_key(self, api_client):
        self.get_error_response(api_client, status=401, code="unauthenticated")

    @pytest.mark.parametrize("packages", [1, 20])
    def test_statements_are_the_baseline_whatever_the_catalog_size(self, auth_client, packages):
        for index in range(packages):
            PackageFactory(id=f"gpu-p{index}", spec_name=f"p{index}", gpu=1, count=1)
        auth_client.get(self.path)  # the key's last-used stamp is written once a minute
        # key + tenant (with its usage counters), packages, the clusters (with the mirror's
        # time and last sync error), their availability
        self.assert_statement_count(auth_client)
        assert len(auth_client.get(self.path).json()["data"]) == packages


class TestPackageDetail(EndpointTest):
    path = "/api/v1/packages/{pk}"

    def test_retrieve_is_case_insensitive(self, auth_client):
        PackageFactory(article=True)
        data = self.get_success_response(auth_client, pk=ARTICLE_PACKAGE_ID.upper()).json()
        assert data["data"]["id"] == ARTICLE_PACKAGE_ID
        assert "availability" in data["data"]

    @pytest.mark.parametrize("pk", [ARTICLE_PACKAGE_ID, "gpu-nope", "Not_A_Label"])
    def test_inactive_unknown_or_impossible_id_is_404(self, auth_client, pk):
        PackageFactory(article=True, active=False)
        self.get_error_response(auth_client, pk=pk, status=404, code="not_found")

    def test_statements_are_the_baseline(self, auth_client):
        PackageFactory(article=True)
        auth_client.get("/api/v1/packages")  # warm the key's last-used stamp
        self.assert_statement_count(auth_client, pk=ARTICLE_PACKAGE_ID)
