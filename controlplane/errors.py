"""Domain errors: what a service raises when a request cannot be carried out. Each has a code
a client can act on, a message and details; none knows HTTP. The API edge maps codes to
statuses (controlplane/api/errors.py), the dashboard shows messages."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A request refused for a reason its sender can act on."""

    code = "invalid_request"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidRequest(DomainError):
    """What was sent is not valid; `details.fields` names each field (API paths)."""

    code = "invalid_request"


class NotFound(DomainError):
    code = "not_found"


class ServiceUnavailable(DomainError):
    """A dependency is briefly away; nothing was done and retrying is safe."""

    code = "service_unavailable"


class Throttled(DomainError):
    """Too much at once (a rate or a cap on concurrent use): retrying after `retry_after`
    seconds may succeed. The API sends it as 429 with a Retry-After header."""

    code = "throttled"

    def __init__(
        self, message: str, *, retry_after: int, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message, details={**(details or {}), "retryAfter": retry_after})
        self.retry_after = retry_after
