"""Dashboard reads over the runtime, catalog and inventory models; each is a fixed number of
queries whatever the number of units, devices or packages."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import Count, Q, QuerySet

from catalog import selectors as catalog_selectors
from catalog.models import Package
from dashboard.access import Scope
from dashboard.charts import Sample
from inventory import selectors as inventory_selectors
from inventory.models import Device, Node, SyncRun
from runtime import availability
from runtime.models import GPUUnit, UnitEvent, UnitPhase


@dataclass(frozen=True)
class DeviceTotals:
    name: str
    total: int
    allocated: int

    @property
    def free(self) -> int:
        return self.total - self.allocated


@dataclass(frozen=True)
class NodeTotals(DeviceTotals):
    ready: bool | None


@dataclass(frozen=True)
class PackageRow:
    package: Package
    placeable_now: int
    free_devices: int
    reason: str


def device_totals_by_class() -> list[DeviceTotals]:
    """Devices of complete pools per device class they match (a device may match several)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT class.name, count(*), count(*) FILTER (WHERE device.allocated)
            FROM {Device._meta.db_table} AS device
            CROSS JOIN LATERAL unnest(device.device_classes) AS class(name)
            WHERE device.pool_complete
            GROUP BY class.name
            ORDER BY class.name
            """
        )
        return [DeviceTotals(name, total, allocated) for name, total, allocated in cursor]


def device_totals_by_node() -> list[NodeTotals]:
    """Devices of complete pools per node, with the node's readiness (two queries)."""
    ready = dict(Node.objects.values_list("name", "ready"))
    rows = (
        Device.objects.filter(pool_complete=True)
        .values("node_name")
        .annotate(total=Count("id"), allocated=Count("id", filter=Q(allocated=True)))
        .order_by("node_name")
    )
    return [
        NodeTotals(
            row["node_name"] or "(no node)",
            row["total"],
            row["allocated"],
            ready.get(row["node_name"]),
        )
        for row in rows
    ]


def units_by_phase(units: QuerySet[GPUUnit]) -> list[tuple[str, int]]:
    """Every phase in lifecycle order with how many of `units` are in it."""
    counts = dict(units.order_by().values_list("phase").annotate(n=Count("id")))
    return [(phase, counts.get(phase, 0)) for phase in UnitPhase.values]


def utilisation_samples(limit: int = 120) -> list[Sample]:
    """Allocated and total devices of the latest successful syncs, oldest first."""
    runs = (
        SyncRun.objects.filter(finished_at__isnull=False, error="", total_devices__isnull=False)
        .order_by("-started_at")
        .values_list("finished_at", "allocated_devices", "total_devices")[:limit]
    )
    return [Sample(at, allocated or 0, total) for at, allocated, total in reversed(runs)]


def package_rows(scope: Scope, *, include_inactive: bool = False) -> list[PackageRow]:
    """Packages with what can be placed now: for a tenant bounded by its quota (the API's
    availability), for staff what the cluster could place."""
    packages = list(
        Package.objects.order_by("id")
        if include_inactive
        else catalog_selectors.list_active_packages()
    )
    if scope.tenant is not None and not scope.is_staff:
        offered = availability.for_tenant(scope.tenant, packages)
        return [
            PackageRow(
                package,
                offered[package.id]["placeableNow"],
                offered[package.id]["freeDevices"],
                offered[package.id]["reason"],
            )
            for package in packages
        ]
    cluster = inventory_selectors.list_package_availability()
    rows = []
    for package in packages:
        row = cluster.get(package.id)
        if not package.active:
            reason = "inactive: not offered to customers"
        elif row is None:
            reason = "not in the inventory yet"
        else:
            reason = row.reason if row.placeable == 0 else ""
        rows.append(
            PackageRow(
                package,
                row.placeable if row else 0,
                row.free_devices if row else 0,
                reason,
            )
        )
    return rows


def list_units(
    scope: Scope, *, phase: str = "", package_id: str = "", tenant_slug: str = ""
) -> QuerySet[GPUUnit]:
    units = scope.units().select_related("tenant").order_by("-id")
    if phase:
        units = units.filter(phase=phase)
    if package_id:
        units = units.filter(package_id=package_id)
    if tenant_slug and scope.is_staff:
        units = units.filter(tenant__slug=tenant_slug)
    return units


def get_unit(scope: Scope, uid: str) -> GPUUnit | None:
    """A unit by its UID, only if the scope may see it."""
    return scope.units().select_related("tenant").filter(uid=uid).first()


def list_events(unit: GPUUnit) -> QuerySet[UnitEvent]:
    return UnitEvent.objects.filter(unit=unit).order_by("id")


def package_ids_in_use(scope: Scope) -> list[str]:
    """Package IDs for the units filter: the catalog's plus any a unit still references."""
    ordered = set(scope.units().order_by().values_list("package_id", flat=True).distinct())
    return sorted(ordered | set(Package.objects.values_list("id", flat=True)))
