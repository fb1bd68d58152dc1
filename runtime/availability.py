"""Package availability for a tenant: what the cluster can place (from the inventory mirror)
bounded by what the tenant's quota still allows (the same usage the create pre-check uses)."""

from __future__ import annotations

from collections.abc import Iterable

from catalog.models import Package
from inventory import selectors as inventory_selectors
from tenancy import services as tenancy_services
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


def for_tenant(
    tenant: Tenant,
    packages: Iterable[Package],
    *,
    states: list[inventory_selectors.ClusterState] | None = None,
) -> dict[str, dict]:
    """`{package id: {placeableNow, freeDevices, reason, asOf, stale, regions}}` in two
    queries (the clusters with their mirror's freshness, then the availability; `states` when
    the caller read the first): the package over every cluster that takes units now, and per
    region it is sold in (`regions`: [{name, placeableNow, freeDevices}], in placement
    order)."""
    states = inventory_selectors.cluster_states() if states is None else states
    by_cluster = inventory_selectors.availability_by_cluster(states)
    freshness = inventory_selectors.freshness_of(states)
    usage = usage_of(tenant)
    as_of = freshness.as_of.isoformat() if freshness.as_of else None
    open_clusters = [s for s in states if s.cluster.enabled and s.takes_units]
    result = {}
    for package in packages:
        quota_allows = headroom(tenant, package, usage)
        regions: dict[str, dict] = {}
        for state in states:
            cluster = state.cluster
            if not cluster.enabled or (package.regions and cluster.region not in package.regions):
                continue
            shown = regions.setdefault(
                cluster.region, {"name": cluster.region, "placeableNow": 0, "freeDevices": 0}
            )
            if state.takes_units and (row := by_cluster.get(cluster.name, {}).get(package.id)):
                shown["placeableNow"] += row.placeable
                shown["freeDevices"] += row.free_devices
        for shown in regions.values():
            shown["placeableNow"] = min(shown["placeableNow"], quota_allows)
        rows = [
            row
            for state in open_clusters
            if (not package.regions or state.cluster.region in package.regions)
            and (row := by_cluster.get(state.cluster.name, {}).get(package.id)) is not None
        ]
        row = max(rows, key=lambda r: (r.placeable, r.free_devices), default=None)
        fits = sum(r.placeable for r in rows)
        if headroom(tenant, package, NO_USAGE) == 0:
            # Not even with every unit gone: the quota's own sentence says which limit.
            larger = tenancy_services.quota_problem(
                tenant,
                NO_USAGE,
                cpu_millicores=package.cpu_millicores,
                memory_bytes=package.memory_bytes,
            )
            reason = larger.message if larger else "larger than your quota"
        elif not regions:
            reason = "not sold in any region with a cluster"
        elif not any(
            not package.regions or s.cluster.region in package.regions for s in open_clusters
        ):
            reason = "no cluster of its regions takes new units now"
        elif row is None:
            reason = "not in the inventory yet"
        elif fits == 0:
            reason = row.reason
        elif not quota_allows:
            # The quota's own refusal: which limit, what is in use, and what to do.
            refusal = tenancy_services.quota_problem(
                tenant,
                usage,
                cpu_millicores=package.cpu_millicores,
                memory_bytes=package.memory_bytes,
            )
            reason = refusal.message if refusal else "your quota is used up"
        else:
            # Empty, but for a fallback package placed by an alternative (which says so).
            reason = row.reason
        result[package.id] = {
            "placeableNow": min(fits, quota_allows),
            "freeDevices": sum(r.free_devices for r in rows),
            "reason": reason,
            "asOf": as_of,
            "stale": freshness.stale,
            "regions": list(regions.values()),
        }
    return result


def regions_for(tenant: Tenant, packages: Iterable[Package]) -> list[dict]:
    """GET /regions: each region with a cluster enabled, its clusters' health, and per package
    sold there how many more units fit now and the free devices it could use (the mirror,
    bounded by the tenant's quota), in the clusters' placement order; the same queries
    whatever the number of clusters, packages and devices."""
    packages = list(packages)
    states = inventory_selectors.cluster_states()
    offered = for_tenant(tenant, packages, states=states)
    shown: dict[str, dict] = {}
    for state in states:
        if not state.cluster.enabled:
            continue
        region = shown.setdefault(
            state.cluster.region,
            {"name": state.cluster.region, "takesUnits": False, "clusters": [], "packages": []},
        )
        region["takesUnits"] = region["takesUnits"] or state.takes_units
        region["clusters"].append(
            {
                "name": state.cluster.name,
                "displayName": state.cluster.display_name or state.cluster.name,
                "health": state.health,
                "cordoned": state.cluster.cordoned,
                "asOf": state.as_of,
            }
        )
    for package in packages:
        for entry in offered[package.id]["regions"]:
            shown[entry["name"]]["packages"].append({"packageID": package.id, **entry})
    for region in shown.values():
        for entry in region["packages"]:
            del entry["name"]
    return list(shown.values())
