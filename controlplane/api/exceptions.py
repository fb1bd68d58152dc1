"""DRF exception handler that renders every error in the envelope."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response

from controlplane.api.errors import HTTP_HEADERS, error_body, http_status
from controlplane.api.renderers import EnvelopedResponse
from controlplane.errors import DomainError, ServiceUnavailable, Throttled

logger = logging.getLogger(__name__)

# DRF's exception classes mapped to our public codes.
_CODES: list[tuple[type[Exception], str]] = [
    (exceptions.ParseError, "invalid_request"),
    (exceptions.ValidationError, "invalid_request"),
    (exceptions.NotAuthenticated, "unauthenticated"),
    (exceptions.AuthenticationFailed, "unauthenticated"),
    (exceptions.PermissionDenied, "forbidden"),
    (exceptions.NotFound, "not_found"),
    (exceptions.MethodNotAllowed, "method_not_allowed"),
    (exceptions.NotAcceptable, "not_acceptable"),
    (exceptions.UnsupportedMediaType, "unsupported_media_type"),
    (exceptions.Throttled, "throttled"),
]


def _enveloped(body: dict, status_code: int, headers: dict | None = None) -> Response:
    return EnvelopedResponse(body, status=status_code, headers=headers)


def envelope_exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, OperationalError | InterfaceError):
        # The database is unreachable or dropped us: nothing was done, retrying is safe.
        logger.warning("database unavailable in %s: %s", context.get("view"), exc)
        exc = ServiceUnavailable("The service is briefly unavailable; retry.")
    if isinstance(exc, DomainError):
        domain_headers = dict(HTTP_HEADERS.get(exc.code, {}))
        if isinstance(exc, Throttled):
            domain_headers["Retry-After"] = str(exc.retry_after)
        return _enveloped(
            error_body(exc.code, exc.message, exc.details), http_status(exc), domain_headers
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        logger.exception("unhandled error in %s", context.get("view"))
        return _enveloped(
            error_body("internal_error", "The server failed to handle this request."),
            status.HTTP_500_INTERNAL_SERVER_ERROR,
        )

    code = next((name for cls, name in _CODES if isinstance(exc, cls)), "error")
    headers: dict[str, str] = {}
    if auth_header := getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = auth_header
    if wait := getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(wait))
    if isinstance(exc, exceptions.ValidationError):
        message, details = "The request is invalid.", {"fields": exc.detail}
        if isinstance(exc.detail, list):
            details = {"errors": exc.detail}
    else:
        message, details = str(exc.detail), {}
    return _enveloped(error_body(code, message, details), exc.status_code, headers)
