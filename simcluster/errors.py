"""API errors rendered as metav1 Status bodies, worded like the real kube-apiserver's."""

from __future__ import annotations

from typing import Any


def qualified(resource: str, group: str = "") -> str:
    """`pods` for core, `resourceclaims.resource.k8s.io` otherwise, as the server prints them."""
    return f"{resource}.{group}" if group else resource


class ApiError(Exception):
    """An error the API server answers with a `Status` body and HTTP `code`."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        }
        # metav1.Status omits an empty reason (StatusReasonUnknown).
        if self.reason:
            status["reason"] = self.reason
        if self.details is not None:
            status["details"] = self.details
        return status

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)

    @classmethod
    def forbidden(cls, message: str, details: dict | None = None) -> ApiError:
        return cls(403, "Forbidden", message, details)

    @classmethod
    def not_found(cls, resource: str, name: str, group: str = "") -> ApiError:
        details: dict[str, Any] = {"name": name, "kind": resource}
        if group:
            details["group"] = group
        return cls(404, "NotFound", f'{qualified(resource, group)} "{name}" not found', details)

    @classmethod
    def already_exists(cls, resource: str, name: str, group: str = "") -> ApiError:
        details: dict[str, Any] = {"name": name, "kind": resource}
        if group:
            details["group"] = group
        message = f'{qualified(resource, group)} "{name}" already exists'
        return cls(409, "AlreadyExists", message, details)

    @classmethod
    def conflict(cls, resource: str, name: str, message: str, group: str = "") -> ApiError:
        details: dict[str, Any] = {"name": name, "kind": resource}
        if group:
            details["group"] = group
        full = f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {message}'
        return cls(409, "Conflict", full, details)

    @classmethod
    def stale(cls, resource: str, name: str, group: str = "") -> ApiError:
        """The optimistic-concurrency 409 a write with an outdated resourceVersion gets."""
        return cls.conflict(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version "
            "and try again",
            group,
        )

    @classmethod
    def invalid(cls, kind: str, name: str, causes: list[dict], group: str = "") -> ApiError:
        """422 with one cause per field error; each cause is {reason, message, field}."""
        errors = [
            f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes
        ]
        qualified_kind = f"{kind}.{group}" if group else kind
        message = f'{qualified_kind} "{name}" is invalid'
        if len(errors) == 1:
            message += f": {errors[0]}"
        elif errors:
            message += f": [{', '.join(errors)}]"
        details: dict[str, Any] = {"name": name, "kind": kind, "causes": causes}
        if group:
            details["group"] = group
        return cls(422, "Invalid", message, details)

    @classmethod
    def method_not_allowed(
        cls, message: str = "the server does not allow this method on the requested resource"
    ) -> ApiError:
        return cls(405, "MethodNotAllowed", message)

    @classmethod
    def unsupported_media_type(cls, content_type: str) -> ApiError:
        return cls(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, "
            "application/apply-patch+yaml, application/strategic-merge-patch+json "
            f'(got "{content_type}")',
        )

    @classmethod
    def gone(cls, message: str) -> ApiError:
        return cls(410, "Expired", message)

    @classmethod
    def internal(cls, message: str) -> ApiError:
        return cls(500, "InternalError", message)

    @classmethod
    def unclassified(cls, message: str) -> ApiError:
        """What the server answers for an error its handlers did not turn into a Status:
        500, no reason, the error's text (responsewriters.ErrorToAPIStatus)."""
        return cls(500, "", message)


def cause(reason: str, field: str, message: str) -> dict[str, str]:
    """One StatusCause; `reason` is a field.ErrorType such as FieldValueInvalid."""
    return {"reason": reason, "message": message, "field": field}
