"""GET /api/v1/packages: active packages in the article's JSON shape, in the envelope."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalog.tests.factories import PackageFactory

pytestmark = pytest.mark.django_db


def test_list_returns_active_packages_in_article_shape(auth_client):
    PackageFactory(selectors=['device.driver == "gpu.nvidia.com"'])
    PackageFactory(id="gpu-retired", spec_name="old", gpu=1, count=1, active=False)
    response = auth_client.get("/api/v1/packages")
    assert response.status_code == 200
    assert response.json() == {
        "data": [
            {
                "id": "gpu-rtx3080-2x-cpu10-mem40g",
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
            }
        ]
    }


def test_list_uses_one_query_whatever_the_catalog_size(auth_client):
    for index in range(20):
        PackageFactory(id=f"gpu-p{index}", spec_name=f"p{index}", gpu=1, count=1)
    auth_client.get("/api/v1/packages")  # the key's last-used stamp is written once a minute
    with CaptureQueriesContext(connection) as queries:
        assert auth_client.get("/api/v1/packages").status_code == 200
    assert len(queries) == 2  # the key (with its tenant) and the packages


def test_retrieve_is_case_insensitive(auth_client):
    PackageFactory()
    response = auth_client.get("/api/v1/packages/GPU-RTX3080-2X-CPU10-MEM40G")
    assert response.status_code == 200
    assert response.json()["data"]["id"] == "gpu-rtx3080-2x-cpu10-mem40g"


def test_retrieve_inactive_or_unknown_is_404_in_envelope(auth_client):
    PackageFactory(active=False)
    response = auth_client.get("/api/v1/packages/gpu-rtx3080-2x-cpu10-mem40g")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_packages_need_an_api_key(api_client):
    response = api_client.get("/api/v1/packages")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
