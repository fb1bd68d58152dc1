"""Errors the runtime's services raise; each maps to one public error code."""

from controlplane.api.errors import ApiError, InvalidRequest, NotFound, ServiceUnavailable


class OperationConflict(ApiError):
    status_code = 409
    code = "operation_conflict"


class NameConflict(ApiError):
    status_code = 409
    code = "name_conflict"


class QuotaExceeded(ApiError):
    """The tenant's own quota refuses the order (the message names the limit); the cluster
    being full is not this."""

    status_code = 409
    code = "quota_exceeded"


class StorageInUse(ApiError):
    """A storage that only one live unit may mount is mounted, or a mounted one would be
    deleted."""

    status_code = 409
    code = "storage_in_use"


__all__ = [
    "InvalidRequest",
    "NameConflict",
    "NotFound",
    "OperationConflict",
    "QuotaExceeded",
    "ServiceUnavailable",
    "StorageInUse",
]
