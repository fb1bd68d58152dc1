"""Errors tenancy's services raise; each maps to one public error code."""

from controlplane.api.errors import ApiError


class SSHKeyConflict(ApiError):
    """The tenant already has a key of that name, or the same key under another name."""

    status_code = 409
    code = "ssh_key_conflict"
