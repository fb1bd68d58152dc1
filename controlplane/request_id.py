"""Every request has an id, answered in `X-Request-ID` and kept with what the request did (the
audit log), so a client, a log line and an audit entry name the same request."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

HEADER = "X-Request-ID"
# An id a proxy or client sent is kept when it is a plain token (an ingress's, a UUID);
# anything else is replaced, so the id never carries spaces, quotes or control characters
# into a header, a log line or the audit log.
_TOKEN = re.compile(r"[A-Za-z0-9._:+=/@-]{1,128}")


def request_id(request: HttpRequest) -> str:
    """The request's id (set by RequestIdMiddleware; "" for a request that never passed it)."""
    return getattr(request, "request_id", "")


class RequestIdMiddleware:
    """Takes the request's id from `X-Request-ID` when it is a plain token of at most 128
    characters, else makes one (a UUID's hex), and answers it in `X-Request-ID`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        sent = request.headers.get(HEADER, "")
        request.request_id = sent if _TOKEN.fullmatch(sent) else uuid.uuid4().hex  # type: ignore[attr-defined]
        response = self.get_response(request)
        response[HEADER] = request.request_id  # type: ignore[attr-defined]
        return response
