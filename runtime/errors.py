"""Errors the runtime's services raise; each maps to one public error code."""

from controlplane.api.errors import ApiError, InvalidRequest, NotFound, ServiceUnavailable


class OperationConflict(ApiError):
    status_code = 409
    code = "operation_conflict"


class NameConflict(ApiError):
    status_code = 409
    code = "name_conflict"


class InsufficientCapacity(ApiError):
    status_code = 409
    code = "insufficient_capacity"


__all__ = [
    "InsufficientCapacity",
    "InvalidRequest",
    "NameConflict",
    "NotFound",
    "OperationConflict",
    "ServiceUnavailable",
]
