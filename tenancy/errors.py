"""Errors tenancy's services raise; each maps to one public error code."""

from controlplane.errors import DomainError


class SSHKeyConflict(DomainError):
    """The tenant already has a key of that name, or the same key under another name."""

    code = "ssh_key_conflict"
