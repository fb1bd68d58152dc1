"""Middleware: /metrics, request latency for it, and the API's envelope for everything under
/api/ (oversized bodies refused before anything reads them, HTML error pages replaced)."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from controlplane import metrics
from controlplane.api.errors import error_response

# What a non-JSON answer under /api/ (Django's debug 404 page, the 400 for a disallowed Host,
# a CSRF 403) becomes: its status kept, its body replaced by the envelope.
_ENVELOPE_FOR_STATUS = {
    400: ("invalid_request", "The request is invalid."),
    403: ("forbidden", "The request is not allowed."),
    404: ("not_found", "No API route matches this path."),
    405: ("method_not_allowed", "The method is not allowed on this path."),
    500: ("internal_error", "The server failed to handle this request."),
}


_LARGE_BODY_PATHS = frozenset({"/api/v1/secrets"})


class ApiEnvelopeMiddleware:
    """Everything under /api/ answers JSON in the envelope, in debug mode as in production:
    bodies over API_MAX_BODY_BYTES are refused with 413 before anything reads them, and any
    answer Django renders as HTML (no route, a disallowed Host, debug error pages) is replaced
    by the envelope with the same status."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        # A tenant secret may be as large as a Kubernetes Secret (1 MiB): its path alone
        # takes bodies that large.
        limit = (
            settings.SECRET_MAX_BODY_BYTES
            if request.path in _LARGE_BODY_PATHS
            else settings.API_MAX_BODY_BYTES
        )
        if length > limit:
            return error_response(
                413, "payload_too_large", f"Request bodies are limited to {limit} bytes."
            )
        response = self.get_response(request)
        if response.status_code >= 400 and not response.get("Content-Type", "").startswith(
            "application/json"
        ):
            code, message = _ENVELOPE_FOR_STATUS.get(
                response.status_code, ("error", "The request failed.")
            )
            replaced = error_response(response.status_code, code, message)
            for header in ("Allow", "Retry-After", "WWW-Authenticate"):
                if header in response:
                    replaced[header] = response[header]
            return replaced
        return response


class MetricsMiddleware:
    """Answers GET /metrics (Prometheus text: every web process's samples and the gauges read
    at scrape time) first of all, before host validation and the https redirect, so a
    scraper reaches each pod by its IP. With METRICS_TOKEN set it wants that bearer token."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path != "/metrics":
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            return HttpResponse("GET /metrics\n", status=405, headers={"Allow": "GET, HEAD"})
        if settings.METRICS_TOKEN:
            sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(sent.encode(), settings.METRICS_TOKEN.encode()):
                return HttpResponse("metrics need the bearer token\n", status=401)
        return HttpResponse(
            metrics.exposition(with_scrape_time=True), content_type=metrics.CONTENT_TYPE
        )


# Any token is a method to HTTP: only these become label values (the rest are "other").
_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}


class ApiMetricsMiddleware:
    """Times every API request by its route (the URL pattern, so a unit's name never becomes
    a label), method and status."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = "/" + match.route if match is not None and match.route else "unmatched"
        method = request.method if request.method in _METHODS else "other"
        metrics.API_REQUEST_SECONDS.labels(route, method, str(response.status_code)).observe(
            time.perf_counter() - started
        )
        return response
