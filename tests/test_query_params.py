"""Every API route refuses query parameters it does not define (400 in the envelope), after
authentication, and before it acts: a misspelt filter never silently returns everything, and
a refused DELETE or POST changes nothing."""

from __future__ import annotations

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from runtime import orders
from runtime.models import GPUUnit, UnitPhase
from tenancy.tests.factories import TenantFactory
from tests.endpoints import QUERY_COUNTS, client_for

pytestmark = pytest.mark.django_db

ROUTES = sorted(QUERY_COUNTS)  # every API route (tests/test_query_counts.py keeps it so)


@pytest.fixture
def operator():
    tenant = TenantFactory(is_operator=True)
    PackageFactory(article=True)
    orders.create_unit(
        tenant=tenant, operation_id="op-x", name="x", package_id=ARTICLE_PACKAGE_ID, image="busybox"
    )
    return client_for(tenant)


def _url(route: str) -> tuple[str, str]:
    method, path = route.split(" ", 1)
    for placeholder in ("{name}", "{pk}", "{operation_id}"):
        path = path.replace(placeholder, "x" if placeholder != "{pk}" else ARTICLE_PACKAGE_ID)
    return method.lower(), path


@pytest.mark.parametrize("route", ROUTES)
def test_an_unknown_query_parameter_is_400_and_changes_nothing(operator, route):
    method, path = _url(route)
    body = {"operationID": "op-y", "name": "y", "packageID": ARTICLE_PACKAGE_ID, "image": "b"}
    response = getattr(operator, method)(
        f"{path}?packageId=gpu&sort=name", body if method == "post" else None, format="json"
    )
    assert response.status_code == 400, (route, response.content)
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert set(error["details"]["fields"]) == {"packageId", "sort"}
    assert GPUUnit.objects.get(name="x").phase == UnitPhase.ACCEPTED
    assert not GPUUnit.objects.filter(name="y").exists()


def test_the_list_keeps_its_own_parameters(operator):
    query = {"phase": "Accepted", "packageID": ARTICLE_PACKAGE_ID, "limit": "5"}
    response = operator.get("/api/v1/gpu-units", query)
    assert response.status_code == 200
    assert [unit["name"] for unit in response.json()["data"]] == ["x"]


def test_without_a_key_it_is_401_whatever_the_query(api_client):
    response = api_client.get("/api/v1/gpu-units?bogus=1")
    assert response.status_code == 401
