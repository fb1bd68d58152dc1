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


class InvalidState(ApiError):
    """The action makes no sense in the unit's phase (starting a running unit)."""

    status_code = 409
    code = "invalid_state"


class OperationInProgress(ApiError):
    """Another operation on the unit is still open; retry once it has finished."""

    status_code = 409
    code = "operation_in_progress"


class ImmutableField(ApiError):
    """An update names a field fixed at creation (the package: order a new unit instead)."""

    status_code = 400
    code = "immutable_field"


class PreconditionFailed(ApiError):
    """If-Match names a version of the unit that is no longer current."""

    status_code = 412
    code = "precondition_failed"


class PreconditionRequired(ApiError):
    """An update without If-Match: read the unit first and send its etag."""

    status_code = 428
    code = "precondition_required"


__all__ = [
    "ImmutableField",
    "InvalidRequest",
    "InvalidState",
    "NameConflict",
    "NotFound",
    "OperationConflict",
    "OperationInProgress",
    "PreconditionFailed",
    "PreconditionRequired",
    "QuotaExceeded",
    "ServiceUnavailable",
    "StorageInUse",
]
