"""Package availability for a tenant: what the cluster can place (from the inventory mirror)
bounded by what the tenant's quota still allows (the same usage the create pre-check uses)."""

from __future__ import annotations

from collections.abc import Iterable

from catalog.models import Package
from inventory import selectors as inventory_selectors
from tenancy.models import Tenant
from tenancy.selectors import NO_USAGE, TenantUsage, usage_of


def headroom(tenant: Tenant, package: Package, usage: TenantUsage) -> int:
    """More units of `package` the tenant's quota admits."""
    return max(
        0,
        min(
            (tenant.quota_cpu_millicores - usage.cpu_millicores) // max(package.cpu_millicores, 1),
            (tenant.quota_memory_bytes - usage.memory_bytes) // max(package.memory_bytes, 1),
            tenant.quota_claims - usage.claims,
        ),
    )


def for_tenant(tenant: Tenant, packages: Iterable[Package]) -> dict[str, dict]:
    """`{package id: {placeableNow, freeDevices, reason, asOf, stale}}` in three queries."""
    cluster = inventory_selectors.list_package_availability()
    freshness = inventory_selectors.get_freshness()
    usage = usage_of(tenant)
    as_of = freshness.as_of.isoformat() if freshness.as_of else None
    result = {}
    for package in packages:
        row = cluster.get(package.id)
        fits = row.placeable if row else 0
        quota_allows = headroom(tenant, package, usage)
        if headroom(tenant, package, NO_USAGE) == 0:
            reason = "larger than your quota"  # not even with every unit gone
        elif row is None:
            reason = "not in the inventory yet"
        elif fits == 0:
            reason = row.reason
        elif not quota_allows:
            reason = "your quota is used up"
        else:
            # Empty, but for a fallback package placed by an alternative (which says so).
            reason = row.reason
        result[package.id] = {
            "placeableNow": min(fits, quota_allows),
            "freeDevices": row.free_devices if row else 0,
            "reason": reason,
            "asOf": as_of,
            "stale": freshness.stale,
        }
    return result
