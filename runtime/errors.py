"""Errors the runtime's services raise; each maps to one public error code."""

from controlplane.errors import DomainError, InvalidRequest, NotFound, ServiceUnavailable
from tenancy.errors import LimitExceeded, QuotaExceeded


class OperationConflict(DomainError):
    code = "operation_conflict"


class NameConflict(DomainError):
    code = "name_conflict"


class StorageInUse(DomainError):
    """A storage that only one live unit may mount is mounted, or a mounted one would be
    deleted."""

    code = "storage_in_use"


class InvalidState(DomainError):
    """The action makes no sense in the unit's phase (starting a running unit)."""

    code = "invalid_state"


class OperationInProgress(DomainError):
    """Another operation on the unit is still open; retry once it has finished."""

    code = "operation_in_progress"


class ImmutableField(DomainError):
    """An update names a field fixed at creation (the package: order a new unit instead)."""

    code = "immutable_field"


class PreconditionFailed(DomainError):
    """If-Match names a version of the unit that is no longer current."""

    code = "precondition_failed"


class PreconditionRequired(DomainError):
    """An update without If-Match: read the unit first and send its etag."""

    code = "precondition_required"


class InsufficientCapacity(DomainError):
    """No cluster of the regions tried can place the unit now (placement, with a choice of
    clusters): details name the regions."""

    code = "insufficient_capacity"


class RegionUnavailable(DomainError):
    """No cluster of the region (or of any region) takes new units now: unreachable or
    cordoned."""

    code = "region_unavailable"


class ReservationFull(DomainError):
    """Every slot of the reservation an order names is taken by a live unit."""

    code = "reservation_full"


__all__ = [
    "ImmutableField",
    "InsufficientCapacity",
    "InvalidRequest",
    "InvalidState",
    "LimitExceeded",
    "NameConflict",
    "NotFound",
    "OperationConflict",
    "OperationInProgress",
    "PreconditionFailed",
    "PreconditionRequired",
    "QuotaExceeded",
    "RegionUnavailable",
    "ReservationFull",
    "ServiceUnavailable",
    "StorageInUse",
]
