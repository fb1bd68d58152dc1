"""Errors tenancy's services raise; each maps to one public error code."""

from controlplane.errors import DomainError


class SSHKeyConflict(DomainError):
    """The tenant already has a key of that name, or the same key under another name."""

    code = "ssh_key_conflict"


class QuotaExceeded(DomainError):
    """The tenant's own quota refuses the order (the message names the limit); the cluster
    being full is not this."""

    code = "quota_exceeded"


class LimitExceeded(DomainError):
    """A count the platform caps per tenant (SSH keys, secrets, ...) is reached: the message
    names the limit; deleting one makes room."""

    code = "limit_exceeded"


class BudgetExceeded(DomainError):
    """The tenant's month's spend reached its budget in enforce mode: no new order or start
    until the budget is raised or the month ends."""

    code = "budget_exceeded"
