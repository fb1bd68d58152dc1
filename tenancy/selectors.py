"""Tenant reads."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.validation import fold_case
from tenancy.models import SSHKey, Tenant


@dataclass(frozen=True)
class TenantUsage:
    """What a tenant's live units hold against its quota."""

    cpu_millicores: int
    memory_bytes: int
    claims: int


NO_USAGE = TenantUsage(0, 0, 0)


def usage_of(tenant: Tenant) -> TenantUsage:
    """The tenant's usage counters (the ones orders charge) as read with the tenant: a request
    has just read it to authenticate, so this asks the database nothing."""
    return TenantUsage(tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims)


def get_tenant(*, slug: str) -> Tenant | None:
    return Tenant.objects.filter(slug=fold_case(slug.strip())).first()


def count_ssh_keys(tenant: Tenant) -> int:
    return SSHKey.objects.filter(tenant=tenant).count()
