"""Errors billing's services raise; each maps to one public error code."""

from controlplane.errors import DomainError


class ExportNotReady(DomainError):
    """A usage export was asked for its bytes before a worker finished it (or it failed)."""

    code = "export_not_ready"
