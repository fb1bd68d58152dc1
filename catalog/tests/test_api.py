"""GET /api/v1/packages: active packages in the article's JSON shape, in the envelope."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalog.tests.factories import PackageFactory

pytestmark = pytest.mark.django_db


def test_list_returns_active_packages_in_article_shape(auth_client):
    PackageFactory(article=True, selectors=['device.driver == "gpu.nvidia.com"'])
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
                "availability": {
                    "placeableNow": 0,
                    "freeDevices": 0,
                    "reason": "not in the inventory yet",
                    "asOf": None,
                    "stale": True,
                },
            }
        ]
    }


@pytest.mark.parametrize("packages", [1, 20])
def test_list_query_count_does_not_grow_with_the_catalog(auth_client, packages):
    for index in range(packages):
        PackageFactory(id=f"gpu-p{index}", spec_name=f"p{index}", gpu=1, count=1)
    auth_client.get("/api/v1/packages")  # the key's last-used stamp is written once a minute
    with CaptureQueriesContext(connection) as queries:
        response = auth_client.get("/api/v1/packages")
    assert len(response.json()["data"]) == packages
    # key + tenant (with its usage counters), packages, cluster availability, last sync run,
    # snapshot time
    assert len(queries) == 5


def test_retrieve_is_case_insensitive(auth_client):
    PackageFactory(article=True)
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
