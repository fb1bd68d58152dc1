"""The error envelope and the domain errors services raise; one shape for every failure."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse


class ApiError(Exception):
    """An error a client can act on. Services raise subclasses; the API renders them."""

    status_code = 400
    code = "invalid_request"
    headers: dict[str, str] = {}

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidRequest(ApiError):
    status_code = 400
    code = "invalid_request"


class NotFound(ApiError):
    status_code = 404
    code = "not_found"


class ServiceUnavailable(ApiError):
    status_code = 503
    code = "service_unavailable"
    headers = {"Retry-After": "1"}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(
    status: int, code: str, message: str, details: dict | None = None
) -> JsonResponse:
    """A plain Django response in the envelope, for paths DRF never sees (404, 500)."""
    return JsonResponse(error_body(code, message, details), status=status)
