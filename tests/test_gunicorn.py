"""What only the real server shows: gunicorn in front of the product, with the repository's
gunicorn.conf.py, on the test database. A chunked request body reaches the API, and the
answers gunicorn writes itself (an oversized header, an overlong request line) are JSON in the
envelope like every other answer."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tenancy.tests.factories import key_for
from tests.servers import gunicorn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(tenant) -> Iterator[tuple[int, str]]:
    """gunicorn on a free port, reading the test database; yields the port and a tenant key."""
    key = key_for(tenant)
    with gunicorn() as base:
        port = urlsplit(base).port
        assert port is not None
        yield port, key


def request(port: int, method: str, path: str, *, headers: dict, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.getheader("Content-Type", ""), response.read()


def test_a_chunked_body_is_read(server):
    port, key = server
    document = {"operationID": "chunked-1", "name": "chunked", "packageID": "nope", "image": "x"}
    encoded = json.dumps(document).encode()
    status, content_type, body = request(
        port,
        "POST",
        "/api/v1/gpu-units",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        body=iter([encoded[:10], encoded[10:]]),  # an iterable body is sent chunked
    )
    assert content_type.startswith("application/json")
    fields = json.loads(body)["error"]["details"]["fields"]
    # Every field arrived: only the package is refused (it does not exist), none is missing.
    assert status == 400
    assert set(fields) == {"packageID"}, fields


def test_an_oversized_chunked_body_is_413(server):
    port, key = server
    status, _, body = request(
        port,
        "POST",
        "/api/v1/gpu-units",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        body=iter([b'{"a": "', b"x" * 70_000, b'"}']),
    )
    assert status == 413
    assert json.loads(body)["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize(
    ("path", "headers", "status", "code"),
    [
        ("/api/v1/packages", {"X-Big": "x" * 9000}, 431, "headers_too_large"),
        ("/api/v1/" + "x" * 5000, {}, 414, "uri_too_long"),
    ],
)
def test_answers_gunicorn_writes_itself_are_the_envelope(server, path, headers, status, code):
    port, _ = server
    got, content_type, body = request(port, "GET", path, headers=headers)
    assert got == status
    assert content_type == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == code
    assert error["message"]
