"""The HTTP side of gpuctl: requests to /api/v1 with the profile's key, the `{"data", "meta"}`
envelope unwrapped, paged lists followed, and every error answer raised as an ApiError."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from gpuctl import __version__
from gpuctl.errors import ApiError

# Seconds to connect, and to wait for each answer (a followed log waits as long as it runs: the
# server ends it after LOGS_FOLLOW_SECONDS).
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0
PAGE_SIZE = 100
Params = Mapping[str, str | int | bool | None]


@dataclass(frozen=True)
class Reply:
    """A successful answer: its `data`, its `meta` (operationID, nextCursor) and status."""

    data: Any
    meta: Mapping[str, Any] = field(default_factory=dict)
    status: int = 200


def path(*parts: str) -> str:
    """An API path from its segments, each quoted (a name is never taken for a sub-path)."""
    return "".join(f"/{quote(part, safe='')}" for part in parts)


class Client:
    def __init__(self, api_url: str, api_key: str, *, session: requests.Session | None = None):
        self.api_url = api_url.rstrip("/")
        # The API's own address is what people copy from the docs: /api/v1 is ours to add.
        self.api_url = self.api_url.removesuffix("/api/v1")
        self.session = session or requests.Session()
        self.session.headers.update(
            {
                "Authorization": f"Bearer {api_key}",
                "Accept": "application/json",
                "User-Agent": f"gpuctl/{__version__}",
            }
        )

    def call(
        self,
        method: str,
        route: str,
        *,
        params: Params | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """`method route` (a path below /api/v1) with a JSON `body`; its enveloped answer."""
        response = self._send(method, route, params=params, body=body, headers=headers)
        if response.status_code == 204 or not response.content:
            return Reply(None, {}, response.status_code)
        envelope = _json(response)
        if not isinstance(envelope, dict) or "data" not in envelope:
            raise ApiError(response.status_code, "bad_response", "the API answered no envelope")
        return Reply(envelope["data"], envelope.get("meta") or {}, response.status_code)

    def get(self, route: str, *, params: Params | None = None) -> Any:
        return self.call("GET", route, params=params).data

    def pages(
        self, route: str, *, params: Params | None = None, most: int | None = None
    ) -> Iterator[Any]:
        """The items of a paged list, a page after another (meta.nextCursor): every one, or
        the first `most`."""
        query: dict[str, str | int | bool | None] = {**(params or {})}
        left = most
        while left is None or left > 0:
            query["limit"] = PAGE_SIZE if left is None else min(PAGE_SIZE, left)
            reply = self.call("GET", route, params=query)
            yield from reply.data
            cursor = reply.meta.get("nextCursor")
            if not cursor:
                return
            query["cursor"] = cursor
            if left is not None:
                left -= len(reply.data)

    def text(
        self, route: str, *, params: Params | None = None, follow: bool = False
    ) -> Iterator[bytes]:
        """A text answer (a log) as it arrives; with `follow`, for as long as the server sends."""
        response = self._send("GET", route, params=params, stream=True, follow=follow)
        with response:
            # read1 hands over what has arrived, whether the server sends chunks or just
            # writes until it closes (iter_content would wait for the end of the latter).
            while chunk := response.raw.read1(65536, decode_content=True):
                yield chunk

    def _send(
        self,
        method: str,
        route: str,
        *,
        params: Params | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        stream: bool = False,
        follow: bool = False,
    ) -> requests.Response:
        url = f"{self.api_url}/api/v1{route}"
        try:
            response = self.session.request(
                method,
                url,
                params=_query(params),
                data=None if body is None else json.dumps(body),
                headers={"Content-Type": "application/json", **(headers or {})}
                if body is not None
                else dict(headers or {}),
                timeout=(CONNECT_TIMEOUT, None if follow else READ_TIMEOUT),
                stream=stream,
            )
        except requests.Timeout:
            raise ApiError(0, "timeout", f"{self.api_url} did not answer in time") from None
        except requests.RequestException as error:
            # urllib3 wraps the cause in two layers of repr; the errno line says it all.
            found = re.search(r"\[Errno -?\d+\] [^'\")]+", str(error))
            reason = found.group(0) if found else str(error)
            raise ApiError(0, "unreachable", f"cannot reach {self.api_url}: {reason}") from None
        if response.status_code >= 400:
            with response:
                raise error_of(response)
        return response


def error_of(response: requests.Response) -> ApiError:
    """The ApiError of an error answer: from its envelope, else from its status and text."""
    retry_after = response.headers.get("Retry-After", "")
    try:
        error = _json(response)["error"]
        return ApiError(
            response.status_code,
            str(error["code"]),
            str(error["message"]),
            error.get("details") or {},
            retry_after=retry_after,
        )
    except (ApiError, KeyError, TypeError):
        text = " ".join(response.text.split())[:200] or response.reason
        return ApiError(response.status_code, "http_error", text, retry_after=retry_after)


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise ApiError(response.status_code, "bad_response", "the API answered no JSON") from None


def _query(params: Params | None) -> dict[str, str | int] | None:
    """Query parameters as the API reads them: booleans as true/false, None left out."""
    if not params:
        return None
    return {
        key: ("true" if value else "false") if isinstance(value, bool) else value
        for key, value in params.items()
        if value is not None
    }
