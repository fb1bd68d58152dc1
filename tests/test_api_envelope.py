"""Every response under /api/ is in the envelope: success, 404, 405, bad JSON, 415, 500."""

import pytest
from django.test import override_settings

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.urls")]


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


def test_success_is_wrapped_in_data(api_client):
    response = api_client.post("/api/v1/_test/echo", {"a": 1}, format="json")
    assert response.status_code == 201
    assert response.json() == {"data": {"a": 1}}


@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v2/packages", "/api/", "/api/v1/health/"])
def test_unknown_route_is_404_envelope(client, path):
    assert_error(client.get(path), 404, "not_found")


def test_unknown_route_outside_api_stays_html(client):
    response = client.get("/definitely-not-here")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")


def test_wrong_method_is_405_envelope(auth_client):
    error = assert_error(auth_client.delete("/api/v1/packages"), 405, "method_not_allowed")
    assert "DELETE" in error["message"]


def test_malformed_json_is_400_invalid_request(api_client):
    response = api_client.post(
        "/api/v1/_test/echo", data='{"name": ', content_type="application/json"
    )
    error = assert_error(response, 400, "invalid_request")
    assert "JSON parse error" in error["message"]


def test_wrong_content_type_is_415(api_client):
    response = api_client.post("/api/v1/_test/echo", data="name=x", content_type="text/plain")
    assert_error(response, 415, "unsupported_media_type")


@override_settings(DEBUG=False)
def test_unhandled_error_is_500_envelope_without_internals(api_client):
    api_client.raise_request_exception = False
    error = assert_error(api_client.get("/api/v1/_test/broken"), 500, "internal_error")
    assert "boom" not in error["message"]


def test_database_outage_is_503_service_unavailable(auth_client, monkeypatch):
    from django.db import OperationalError

    from runtime import selectors

    def unreachable(**_kwargs):
        raise OperationalError("connection to server failed")

    monkeypatch.setattr(selectors, "list_units", unreachable)
    response = auth_client.get("/api/v1/gpu-units")
    assert_error(response, 503, "service_unavailable")
    assert response["Retry-After"] == "1"
