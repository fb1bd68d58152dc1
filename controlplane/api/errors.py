"""The error envelope, one shape for every failure, and the HTTP status of each domain error."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse

from controlplane.errors import DomainError

# The HTTP status of each domain error code (controlplane/errors.py and the apps' errors
# modules): the one place a service's refusal becomes a status. A code missing here is a 400
# (tests/test_api_envelope.py checks every DomainError subclass is listed).
HTTP_STATUS: dict[str, int] = {
    "invalid_request": 400,
    "immutable_field": 400,
    "not_found": 404,
    "operation_conflict": 409,
    "name_conflict": 409,
    "quota_exceeded": 409,
    "storage_in_use": 409,
    "storage_conflict": 409,
    "ssh_key_conflict": 409,
    "secret_conflict": 409,
    "secret_in_use": 409,
    "invalid_state": 409,
    "operation_in_progress": 409,
    "logs_unavailable": 409,
    "limit_exceeded": 409,
    "budget_exceeded": 409,
    "namespace_not_ready": 409,
    "export_not_ready": 409,
    "insufficient_capacity": 409,
    "reservation_conflict": 409,
    "reservation_full": 409,
    "precondition_failed": 412,
    "precondition_required": 428,
    "throttled": 429,
    "service_unavailable": 503,
    "region_unavailable": 503,
}
HTTP_HEADERS: dict[str, dict[str, str]] = {
    "service_unavailable": {"Retry-After": "1"},
    "namespace_not_ready": {"Retry-After": "2"},
    "region_unavailable": {"Retry-After": "30"},
}


def http_status(error: DomainError) -> int:
    return HTTP_STATUS.get(error.code, 400)


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(
    status: int, code: str, message: str, details: dict | None = None
) -> JsonResponse:
    """A plain Django response in the envelope, for paths DRF never sees (404, 500)."""
    return JsonResponse(error_body(code, message, details), status=status)
