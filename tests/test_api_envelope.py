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


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/nope",
        "/api/v1/gpu-units/",
        "/api/v2/gpu-units",
        "/api/v1/operations/a%2Fb",
        "/api/v1/packages/x/y",
    ],
)
def test_no_route_is_the_404_envelope_in_debug_mode_too(auth_client, path, debug):
    with override_settings(DEBUG=debug):
        error = assert_error(auth_client.get(path), 404, "not_found")
    assert "urlpatterns" not in error["message"].lower()


@pytest.mark.parametrize("debug", [False, True])
def test_a_disallowed_host_is_the_400_envelope(client, debug):
    with override_settings(DEBUG=debug, ALLOWED_HOSTS=["api.example.com"]):
        response = client.get("/api/v1/packages", HTTP_HOST="evil.example.net")
    assert_error(response, 400, "invalid_request")


def test_outside_api_a_disallowed_host_stays_html(client):
    with override_settings(DEBUG=False, ALLOWED_HOSTS=["api.example.com"]):
        response = client.get("/login/", HTTP_HOST="evil.example.net")
    assert response.status_code == 400
    assert not response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("debug", [False, True])
def test_a_lone_surrogate_key_is_a_400_not_a_500(auth_client, debug):
    with override_settings(DEBUG=debug):
        response = auth_client.post(
            "/api/v1/gpu-units", data='{"\\ud800": 1}', content_type="application/json"
        )
    assert "surrogate" in assert_error(response, 400, "invalid_request")["message"]


def test_a_template_nested_ten_thousand_deep_is_a_400(auth_client):
    deep = "[" * 10_000 + "]" * 10_000
    response = auth_client.post(
        "/api/v1/gpu-units",
        data='{"operationID": "o", "name": "n", "packageID": "p", "image": "i", "template": '
        + deep
        + "}",
        content_type="application/json",
    )
    assert "nested deeper" in assert_error(response, 400, "invalid_request")["message"]


def test_a_compressed_body_is_415_not_a_parse_error(auth_client):
    response = auth_client.post(
        "/api/v1/gpu-units",
        data=b"\x1f\x8b\x08\x00",
        content_type="application/json",
        HTTP_CONTENT_ENCODING="gzip",
    )
    assert "gzip" in assert_error(response, 415, "unsupported_media_type")["message"]


@pytest.mark.parametrize("charset", ["zlib_codec", "base64", "rot13", "hex", "no-such-charset"])
def test_a_charset_that_is_not_a_text_encoding_is_415(auth_client, charset):
    response = auth_client.post(
        "/api/v1/gpu-units",
        data=b'{"operationID": "o"}',
        content_type=f"application/json; charset={charset}",
    )
    assert charset in assert_error(response, 415, "unsupported_media_type")["message"]


@pytest.mark.parametrize(
    ("charset", "body"),
    [
        ("utf-16", b'{"operationID": "o"}'),  # no byte order mark: UnicodeError, not a decode
        ("punycode", b'{"a": "\x00"}'),
        ("undefined", b'{"operationID": "o"}'),
        ("utf-8", b'{"operationID": "\xff"}'),
    ],
)
def test_a_body_its_declared_charset_cannot_read_is_400(auth_client, charset, body):
    """Issue 41, item 7: every text codec Python has, tried on random bytes, fails with a
    ValueError of some kind; none reaches a 500."""
    response = auth_client.post(
        "/api/v1/gpu-units", data=body, content_type=f"application/json; charset={charset}"
    )
    assert charset in assert_error(response, 400, "invalid_request")["message"]


def test_a_text_charset_other_than_utf8_is_read(auth_client):
    response = auth_client.post(
        "/api/v1/gpu-units",
        data='{"operationID": "é"}'.encode("latin-1"),
        content_type="application/json; charset=latin-1",
    )
    assert "operationID" in assert_error(response, 400, "invalid_request")["details"]["fields"]


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_domain_error_has_its_http_status_at_the_api_edge():
    """Services raise errors with a code and no status; the API edge maps each code. Every
    error class of the product (imported with its app) is in the table."""
    import billing.errors  # noqa: F401
    import runtime.errors
    import runtime.logs
    import runtime.storage  # noqa: F401
    import tenancy.errors  # noqa: F401
    from controlplane.api.errors import HTTP_STATUS
    from controlplane.errors import DomainError

    codes = {cls.code for cls in _subclasses(DomainError)}
    assert len(codes) >= 14
    assert codes <= set(HTTP_STATUS), codes - set(HTTP_STATUS)
    assert not any(hasattr(cls, "status_code") for cls in _subclasses(DomainError))
