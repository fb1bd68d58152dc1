"""The HTTP client against a scripted session: the key sent, the envelope unwrapped, paged
lists followed to their end (or to `most` items), query values as the API reads them, and an
error answer raised as an ApiError."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from gpuctl.client import Client, path
from gpuctl.errors import ApiError


class ScriptedSession(requests.Session):
    """Answers each request with the next of `bodies` (status, JSON), noting what was asked."""

    def __init__(self, *answers: tuple[int, Any]) -> None:
        super().__init__()
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.asked.append({"method": method, "url": url, **kwargs})
        status, body = self.answers.pop(0)
        answer = requests.Response()
        answer.status_code = status
        answer._content = b"" if body is None else json.dumps(body).encode()
        return answer


def page(items: list[int], cursor: str | None) -> tuple[int, Any]:
    return 200, {"data": items, "meta": {"nextCursor": cursor}}


def test_a_call_sends_the_key_and_json_and_unwraps_the_envelope():
    session = ScriptedSession((201, {"data": {"name": "u"}, "meta": {"operationID": "op"}}))
    reply = Client("http://api/", "secret", session=session).call(
        "POST", "/gpu-units", body={"name": "u"}
    )
    assert (reply.data, reply.meta, reply.status) == ({"name": "u"}, {"operationID": "op"}, 201)
    (asked,) = session.asked
    assert asked["url"] == "http://api/api/v1/gpu-units"
    assert json.loads(asked["data"]) == {"name": "u"}
    assert asked["headers"]["Content-Type"] == "application/json"
    assert session.headers["Authorization"] == "Bearer secret"


@pytest.mark.parametrize(
    "api_url", ["http://api", "http://api/", "http://api/api/v1", "http://api/api/v1/"]
)
def test_an_api_url_with_or_without_the_api_path_reaches_the_same_route(api_url):
    # GPUCTL_API_URL copied with /api/v1 on the end answered a bare 404 (issue 43, item 10).
    session = ScriptedSession((200, {"data": [], "meta": {}}))
    Client(api_url, "k", session=session).call("GET", "/packages")
    assert session.asked[0]["url"] == "http://api/api/v1/packages"


def test_pages_follow_the_cursor_to_the_end_or_to_most():
    session = ScriptedSession(page([1, 2], "c1"), page([3], None))
    client = Client("http://api", "k", session=session)
    assert list(client.pages("/ssh-keys", params={"phase": None, "all": True})) == [1, 2, 3]
    first, second = (asked["params"] for asked in session.asked)
    assert first == {"all": "true", "limit": 100}
    assert second == {"all": "true", "limit": 100, "cursor": "c1"}

    session = ScriptedSession(page([1, 2], "c1"), page([3], "c2"))
    client = Client("http://api", "k", session=session)
    assert list(client.pages("/audit-events", most=3)) == [1, 2, 3]
    assert [asked["params"]["limit"] for asked in session.asked] == [3, 1]


def test_an_error_answer_is_raised_and_no_content_is_none():
    session = ScriptedSession(
        (404, {"error": {"code": "not_found", "message": "gone", "details": {}}}), (204, None)
    )
    client = Client("http://api", "k", session=session)
    with pytest.raises(ApiError) as raised:
        client.get(path("gpu-units", "a/b"))
    assert raised.value.code == "not_found"
    assert session.asked[0]["url"] == "http://api/api/v1/gpu-units/a%2Fb"
    assert client.call("DELETE", "/ssh-keys/k").data is None
