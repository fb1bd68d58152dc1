"""API key authentication: the scheme is case-insensitive (RFC 9110), the key is not."""

import pytest

from tenancy.tests.factories import TenantFactory, key_for

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_bearer_scheme_is_case_insensitive(api_client, scheme):
    key = key_for(TenantFactory())
    response = api_client.get("/api/v1/gpu-units", HTTP_AUTHORIZATION=f"{scheme} {key}")
    assert response.status_code == 200


@pytest.mark.parametrize("header", ["Basic abc", "Bearer", "Bearer ", "Token gcp_x_y"])
def test_other_schemes_and_empty_keys_are_401(api_client, header):
    response = api_client.get("/api/v1/gpu-units", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_the_key_itself_is_case_sensitive(api_client):
    key = key_for(TenantFactory())
    response = api_client.get("/api/v1/gpu-units", HTTP_AUTHORIZATION=f"Bearer {key.upper()}")
    assert response.status_code == 401
