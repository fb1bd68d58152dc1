"""Dashboard reads over the runtime, catalog, inventory and billing models; each is a fixed
number of queries whatever the number of units, devices, packages or tenants."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, Q, QuerySet, Sum

from billing import budgets, periods
from billing import selectors as billing_selectors
from catalog import selectors as catalog_selectors
from catalog.models import Package
from dashboard.access import Scope
from dashboard.charts import Sample
from dracel import quantity
from inventory import clusters
from inventory import selectors as inventory_selectors
from inventory.models import Device, Node, SyncRun
from runtime import actions, availability, outbox, reservations, tenant_secrets
from runtime.models import (
    GPUStorage,
    GPUUnit,
    OperationKind,
    Reservation,
    TenantSecret,
    UnitEvent,
    UnitPhase,
)
from tenancy.models import ApiKey, SSHKey, Tenant, WebhookDelivery, WebhookEndpoint
from tenancy.selectors import usage_of


@dataclass(frozen=True)
class DeviceTotals:
    name: str
    total: int
    allocated: int
    # Allocated, or tainted NoSchedule/NoExecute (never given to a claim): not free.
    unavailable: int = 0

    @property
    def free(self) -> int:
        return self.total - max(self.allocated, self.unavailable)


def _device_counts(prefix: str = "n_", condition: Q | None = None) -> dict:
    """Count, allocated and unavailable devices (matching `condition`), as aggregate terms
    named `<prefix>total` and so on (never a field's name: the filters name the fields)."""
    where = condition if condition is not None else Q()
    return {
        f"{prefix}total": Count("id", filter=where),
        f"{prefix}allocated": Count("id", filter=where & Q(allocated=True)),
        f"{prefix}unavailable": Count("id", filter=where & (Q(allocated=True) | Q(tainted=True))),
    }


def _totals(name: str, counts: dict, prefix: str = "n_") -> DeviceTotals:
    return DeviceTotals(
        name,
        counts[f"{prefix}total"],
        counts[f"{prefix}allocated"],
        counts[f"{prefix}unavailable"],
    )


@dataclass(frozen=True)
class NodeTotals(DeviceTotals):
    ready: bool | None = None


@dataclass(frozen=True)
class PackageRow:
    package: Package
    placeable_now: int
    free_devices: int
    reason: str
    # [{name, placeableNow, freeDevices}] per region it is sold in (a tenant's view), or, for
    # staff, the regions it is sold in with no count
    regions: tuple[dict, ...] = ()
    # What its GPU is, in words: the clusters' product name ("NVIDIA H100 80GB HBM3"), or ""
    product: str = ""

    @property
    def gpu_text(self) -> str:
        """What the unit gets, in words: "2x NVIDIA GeForce RTX 3080" (with a multiplication
        sign), "a share of NVIDIA H100 80GB HBM3 (cores 25)"; the class name where the clusters
        publish no product."""
        package = self.package
        what = self.product or package.device_class_name
        if package.capacity:
            asked = ", ".join(f"{name} {amount}" for name, amount in package.capacity.items())
            return f"a share of {what} ({asked})"
        return f"{package.gpu}\N{MULTIPLICATION SIGN} {what}"

    @property
    def region_text(self) -> str:
        if not self.regions:
            return ", ".join(self.package.regions) or "every region"
        return ", ".join(f"{r['name']} ({r['placeableNow']})" for r in self.regions)


@dataclass(frozen=True)
class DeviceClassTotals:
    """Devices per device class, with the classes every device matches (a catch-all such as
    `gpu.nvidia.com`) kept apart from the model classes: listed among them, each GPU would
    be counted twice and the column would add up to double the cluster."""

    model_classes: list[DeviceTotals]
    catch_all: list[str]
    all_devices: DeviceTotals


def device_totals_by_class() -> DeviceClassTotals:
    """Devices of complete pools per device class they match (a device may match several),
    and the devices themselves counted once (three queries: every class's counts are
    filtered aggregates of one)."""
    complete = Device.objects.filter(pool_complete=True)
    everything = complete.aggregate(**_device_counts())
    all_devices = _totals("All GPU devices", everything)
    # The classes devices belong to: few distinct sets, however many devices.
    names = sorted(
        {
            name
            for classes in complete.values_list("device_classes", flat=True).distinct()
            for name in classes
        }
    )
    per_class = (
        complete.aggregate(
            **{
                term: value
                for index, name in enumerate(names)
                for term, value in _device_counts(
                    f"c{index}_", Q(device_classes__contains=[name])
                ).items()
            }
        )
        if names
        else {}
    )
    classes = [
        _totals(name, per_class, f"c{index}_")
        for index, name in enumerate(names)
        if per_class[f"c{index}_total"]
    ]
    return DeviceClassTotals(
        model_classes=[row for row in classes if row.total < all_devices.total],
        catch_all=[row.name for row in classes if row.total == all_devices.total],
        all_devices=all_devices,
    )


def device_totals_by_node() -> list[NodeTotals]:
    """Devices of complete pools per node, with the node's readiness (two queries). Nodes are
    named `cluster/node` when the mirror holds more than one cluster's."""
    ready = {
        (cluster, name): is_ready
        for cluster, name, is_ready in Node.objects.values_list("cluster", "name", "ready")
    }
    # Mappings, not the stubs' row type: that one misses the terms annotate(**terms) adds.
    rows: list[Mapping[str, Any]] = list(
        Device.objects.filter(pool_complete=True)
        .values("cluster", "node_name")
        .annotate(**_device_counts())
        .order_by("cluster", "node_name")
    )
    several = len({row["cluster"] for row in rows}) > 1
    return [
        NodeTotals(
            (f"{row['cluster']}/" if several else "") + (row["node_name"] or "(no node)"),
            row["n_total"],
            row["n_allocated"],
            row["n_unavailable"],
            ready=ready.get((row["cluster"], row["node_name"])),
        )
        for row in rows
    ]


@dataclass(frozen=True)
class SharedCapacity:
    """One capacity of a shared device (`cores`, `memory`): what its shares hold, of how
    much, and what is left, in the quantities the inventory document gives."""

    name: str
    consumed: str
    total: str
    remaining: str


@dataclass(frozen=True)
class SharedDevice:
    """A device that allows multiple allocations, its capacity handed out in shares."""

    driver: str
    pool: str
    device: str
    node_name: str
    shares: int
    capacities: list[SharedCapacity]


def list_shared_devices() -> list[SharedDevice]:
    """The shared devices of the last sync's inventory document, in its order (one
    statement)."""
    return [
        SharedDevice(
            driver=device["driver"],
            pool=device["pool"],
            device=device["device"],
            node_name=device["nodeName"],
            shares=device["shares"],
            capacities=[
                SharedCapacity(name, device["consumed"][name], total, device["remaining"][name])
                for name, total in sorted(device["capacity"].items())
            ],
        )
        for device in inventory_selectors.shared_devices()
    ]


def units_by_phase(units: QuerySet[GPUUnit]) -> list[tuple[str, int]]:
    """Every phase in lifecycle order with how many of `units` are in it."""
    counts = dict(units.order_by().values_list("phase").annotate(n=Count("id")))
    return [(phase, counts.get(phase, 0)) for phase in UnitPhase.values]


def utilisation_samples(limit: int = 120) -> list[Sample]:
    """Allocated and total devices over every cluster at the latest successful syncs, oldest
    first: each sync's sample adds the other clusters' figures as of their last sync before
    it."""
    runs = (
        SyncRun.objects.filter(finished_at__isnull=False, error="", total_devices__isnull=False)
        .order_by("-started_at")
        .values_list("cluster", "finished_at", "allocated_devices", "total_devices")[:limit]
    )
    latest: dict[str, tuple[int, int]] = {}
    samples = []
    # The filter already excludes null times and totals; the test narrows the nullable columns.
    for cluster, at, allocated, total in reversed(runs):
        if at is None or total is None:
            continue
        latest[cluster] = (allocated or 0, total)
        samples.append(
            Sample(at, sum(a for a, _ in latest.values()), sum(t for _, t in latest.values()))
        )
    return samples


@dataclass(frozen=True)
class RegionRow:
    name: str
    takes_units: bool
    clusters: tuple[inventory_selectors.ClusterState, ...]


def region_rows() -> list[RegionRow]:
    """The regions with an enabled cluster and their clusters' health (one query)."""
    by_region: dict[str, list[inventory_selectors.ClusterState]] = {}
    for state in inventory_selectors.cluster_states():
        if state.cluster.enabled:
            by_region.setdefault(state.cluster.region, []).append(state)
    return [
        RegionRow(name, any(s.takes_units for s in states), tuple(states))
        for name, states in by_region.items()
    ]


def region_names() -> list[str]:
    """The regions an order may name (those with an enabled cluster), in placement order."""
    return clusters.region_names()


def package_rows(scope: Scope, *, include_inactive: bool = False) -> list[PackageRow]:
    """Packages with what can be placed now: for a tenant bounded by its quota (the API's
    availability), for staff what the cluster could place."""
    packages = list(
        Package.objects.order_by("id")
        if include_inactive
        else catalog_selectors.list_active_packages()
    )
    products = inventory_selectors.product_names()
    if scope.tenant is not None and not scope.is_staff:
        offered = availability.for_tenant(scope.tenant, packages)
        return [
            PackageRow(
                package,
                offered[package.id]["placeableNow"],
                offered[package.id]["freeDevices"],
                offered[package.id]["reason"],
                tuple(offered[package.id]["regions"]),
                products.get(package.device_class_name, ""),
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
                product=products.get(package.device_class_name, ""),
            )
        )
    return rows


# The units filter's phase that lists every unit, Terminated ones too.
ALL_PHASES = "all"


def list_units(
    scope: Scope, *, phase: str = "", package_id: str = "", tenant_slug: str = ""
) -> QuerySet[GPUUnit]:
    """The scope's units, newest first. Without a phase, Terminated units are left out: they
    pile up with every order and hold nothing, so they would bury the units that run."""
    units = scope.units().select_related("tenant").order_by("-id")
    if not phase:
        units = units.exclude(phase=UnitPhase.TERMINATED)
    elif phase != ALL_PHASES:
        units = units.filter(phase=phase)
    if package_id:
        units = units.filter(package_id=package_id)
    if tenant_slug and scope.is_staff:
        units = units.filter(tenant__slug=tenant_slug)
    return units


def count_terminated(scope: Scope, *, package_id: str = "", tenant_slug: str = "") -> int:
    """How many Terminated units the default list leaves out, so it can say so."""
    return list_units(
        scope, phase=UnitPhase.TERMINATED, package_id=package_id, tenant_slug=tenant_slug
    ).count()


@dataclass(frozen=True)
class QuotaLine:
    name: str
    used: str
    hard: str


@dataclass(frozen=True)
class ClassUsage:
    device_class: str
    units: int
    gpus_ordered: int
    gpus_allocated: int


@dataclass(frozen=True)
class TenantOverview:
    """What one tenant holds: its quota lines and its live units' GPUs per device class, the
    customer's side of the overview (the cluster's allocation is other tenants' business)."""

    quota: list[QuotaLine]
    classes: list[ClassUsage]


def tenant_overview(tenant: Tenant) -> TenantOverview:
    """The tenant's counters as orders charge them, and its live units by device class (one
    query)."""
    usage = usage_of(tenant)
    rows = (
        GPUUnit.objects.live()
        .filter(tenant=tenant)
        .values("device_class_name")
        .annotate(
            units=Count("id"),
            ordered=Sum("gpu"),
            allocated=Sum("gpu", filter=Q(dra__allocated=True)),
        )
        .order_by("device_class_name")
    )
    return TenantOverview(
        quota=[
            QuotaLine(
                "CPU",
                quantity.format_cpu(usage.cpu_millicores),
                quantity.format_cpu(tenant.quota_cpu_millicores),
            ),
            QuotaLine(
                "Memory",
                quantity.format_bytes(usage.memory_bytes),
                quantity.format_bytes(tenant.quota_memory_bytes),
            ),
            QuotaLine("Units", str(usage.claims), str(tenant.quota_claims)),
        ],
        classes=[
            ClassUsage(
                row["device_class_name"], row["units"], row["ordered"] or 0, row["allocated"] or 0
            )
            for row in rows
        ],
    )


def get_unit(scope: Scope, uid: uuid.UUID) -> GPUUnit | None:
    """A unit by its UID, only if the scope may see it."""
    return scope.units().select_related("tenant").filter(uid=uid).first()


@dataclass(frozen=True)
class UnitAction:
    """One of the unit page's lifecycle buttons: enabled when `refusal` is None, else
    disabled with the words why (`reason_id` names them for aria-describedby)."""

    kind: str
    label: str
    refusal: str | None
    reason_id: str = ""


@dataclass(frozen=True)
class ActionRefusal:
    """Why some of the buttons are disabled: one line for the buttons refused alike."""

    id: str
    labels: list[str]
    message: str


@dataclass(frozen=True)
class UnitActions:
    buttons: dict[str, UnitAction]
    refusals: list[ActionRefusal]


ACTION_LABELS = (
    (OperationKind.START, "Start"),
    (OperationKind.STOP, "Stop"),
    (OperationKind.RESTART, "Restart"),
    (OperationKind.UPDATE, "Edit"),
)


def unit_actions(unit: GPUUnit) -> UnitActions:
    """What the unit page offers now, by the runtime's own rules (actions.refusal); buttons
    refused for the same reason share its line (the unit's open operation refuses them all).
    A fixed number of queries."""
    open_op = outbox.open_operation(unit)
    refusals = {kind: actions.refusal(unit, kind, open_op=open_op) for kind, _ in ACTION_LABELS}
    ids: dict[str, str] = {}
    for message in refusals.values():
        if message is not None and message not in ids:
            ids[message] = f"action-refusal-{len(ids) + 1}"
    return UnitActions(
        buttons={
            kind: UnitAction(kind, label, refusals[kind], ids.get(refusals[kind] or "", ""))
            for kind, label in ACTION_LABELS
        },
        refusals=[
            ActionRefusal(
                reason_id,
                [label for kind, label in ACTION_LABELS if refusals[kind] == message],
                message,
            )
            for message, reason_id in ids.items()
        ],
    )


def list_events(unit: GPUUnit) -> QuerySet[UnitEvent]:
    return UnitEvent.objects.filter(unit=unit).order_by("id")


def package_ids_in_use(scope: Scope) -> list[str]:
    """Package IDs for the units filter: the catalog's plus any a unit still references."""
    ordered = set(scope.units().order_by().values_list("package_id", flat=True).distinct())
    return sorted(ordered | set(Package.objects.values_list("id", flat=True)))


def live_unit_named(tenant: Tenant, name: str) -> bool:
    return GPUUnit.objects.live().filter(tenant=tenant, name=name).exists()


def list_ssh_keys(tenant: Tenant) -> QuerySet[SSHKey]:
    return SSHKey.objects.filter(tenant=tenant).order_by("name")


def list_api_keys(tenant: Tenant) -> QuerySet[ApiKey]:
    """The tenant's API keys, active ones first, newest first (hashes are never read)."""
    return (
        ApiKey.objects.filter(tenant=tenant)
        .defer("key_hash")
        .order_by(F("revoked_at").desc(nulls_first=True), "-created_at")
    )


def get_active_api_key(tenant: Tenant, prefix: str) -> ApiKey | None:
    return list_api_keys(tenant).filter(prefix=prefix, revoked_at__isnull=True).first()


def list_webhooks(tenant: Tenant) -> QuerySet[WebhookEndpoint]:
    """The tenant's webhooks, oldest first (signing secrets are never read)."""
    return (
        WebhookEndpoint.objects.filter(tenant=tenant)
        .defer("secret", "previous_secret")
        .order_by("id")
    )


def list_webhook_deliveries(endpoint: WebhookEndpoint, most: int = 50) -> list[WebhookDelivery]:
    """The endpoint's latest deliveries, newest first (the payload is not read)."""
    return list(
        WebhookDelivery.objects.filter(endpoint=endpoint).defer("payload").order_by("-id")[:most]
    )


def get_webhook(tenant: Tenant, uid: str) -> WebhookEndpoint | None:
    try:
        key = uuid.UUID(uid)
    except ValueError:
        return None
    return list_webhooks(tenant).filter(uid=key).first()


@dataclass(frozen=True)
class MountingUnit:
    """A live unit that mounts a storage, and where."""

    name: str
    uid: str
    mount_path: str
    read_only: bool


@dataclass(frozen=True)
class ReservationRow:
    reservation: Reservation
    usage: reservations.Usage


def list_reservations(tenant: Tenant) -> list[ReservationRow]:
    """The tenant's reservations, newest window first, with what each holds (two queries)."""
    found = list(
        Reservation.objects.filter(tenant=tenant).select_related("package").order_by("-start")
    )
    usage = reservations.usage(found)
    return [ReservationRow(r, usage[r.pk]) for r in found]


def reservable_package_ids() -> list[str]:
    """The active packages of whole devices (a share cannot be reserved)."""
    return [p.id for p in catalog_selectors.list_active_packages() if not p.capacity]


@dataclass(frozen=True)
class StorageRow:
    storage: GPUStorage
    mounted_by: list[MountingUnit]


def list_storages(tenant: Tenant) -> list[StorageRow]:
    """The tenant's storages with the live units mounting each (two queries)."""
    mounted: dict[str, list[MountingUnit]] = {}
    units = (
        GPUUnit.objects.filter(tenant=tenant)
        .exclude(phase=UnitPhase.TERMINATED)
        .exclude(storage_mounts=[])
        .order_by("name")
        .values_list("name", "uid", "storage_mounts")
    )
    for name, uid, mounts in units:
        for mount in mounts:
            mounted.setdefault(mount["name"], []).append(
                MountingUnit(name, str(uid), mount["mountPath"], bool(mount.get("readOnly")))
            )
    return [
        StorageRow(storage, mounted.get(storage.name, []))
        for storage in GPUStorage.objects.filter(tenant=tenant).order_by("name")
    ]


def get_storage_row(tenant: Tenant, name: str) -> StorageRow | None:
    return next((row for row in list_storages(tenant) if row.storage.name == name), None)


@dataclass(frozen=True)
class ReadingUnit:
    """A live unit whose environment reads a secret, and the keys it reads."""

    name: str
    uid: str
    keys: list[str]


@dataclass(frozen=True)
class SecretRow:
    secret: TenantSecret
    used_by: list[ReadingUnit]


def list_secrets(tenant: Tenant) -> list[SecretRow]:
    """The tenant's secrets (names and keys: no value is in the database) with the live units
    reading each (two queries)."""
    reads = tenant_secrets.readers(tenant_id=tenant.pk)
    return [
        SecretRow(
            secret,
            [
                ReadingUnit(name, uid, sorted(keys))
                for (name, uid), keys in reads.get(secret.name, {}).items()
            ],
        )
        for secret in TenantSecret.objects.filter(tenant=tenant).order_by("name")
    ]


def get_secret_row(tenant: Tenant, name: str) -> SecretRow | None:
    return next((row for row in list_secrets(tenant) if row.secret.name == name), None)


@dataclass(frozen=True)
class UnitMount:
    """One of a unit's storage mounts, with the storage as it is now (None once deleted)."""

    name: str
    mount_path: str
    read_only: bool
    storage: GPUStorage | None


def unit_mounts(unit: GPUUnit) -> list[UnitMount]:
    """The unit's storage mounts in the order it lists them (one query, none without mounts)."""
    mounts = unit.storage_mounts or []
    if not mounts:
        return []
    storages = {
        storage.name: storage
        for storage in GPUStorage.objects.filter(
            tenant_id=unit.tenant_id, name__in=[mount["name"] for mount in mounts]
        )
    }
    return [
        UnitMount(
            mount["name"],
            mount["mountPath"],
            bool(mount.get("readOnly")),
            storages.get(mount["name"]),
        )
        for mount in mounts
    ]


# The overview's usage chart: a bar per UTC day over this many days, today the last.
USAGE_DAYS = 30


def billing_now(now: datetime) -> datetime:
    """The moment costs are counted to: the start of the minute. A running unit's cost then
    moves a live page's body once a minute instead of at every poll (and every poll would be
    announced to screen readers as a change)."""
    return now.astimezone(UTC).replace(second=0, microsecond=0)


def unit_costs(units: Iterable[GPUUnit], *, now: datetime) -> dict[uuid.UUID, Decimal]:
    """Cost to date of each of `units` (their ledger rows and running meters, to `now`): one
    call for a whole page of units, a fixed number of statements."""
    return billing_selectors.cost_to_date([unit.uid for unit in units], now=now)


@dataclass(frozen=True)
class CostSummary:
    """A tenant's cost (or every tenant's) for the overview: this month, to date, and per
    package and UTC day over the last USAGE_DAYS days, running units counted to `as_of`."""

    as_of: datetime
    month_start: datetime
    this_month: Decimal
    to_date: Decimal
    by_package_day: dict[tuple[str, date], Decimal]

    @property
    def last_day(self) -> date:
        return self.as_of.date()


def cost_summary(tenant: Tenant | None, *, now: datetime) -> CostSummary:
    """The overview's cost figures of `tenant`, or of all tenants for None (staff)."""
    month = periods.month_start(now)
    chart_start = datetime.combine(
        now.astimezone(UTC).date() - timedelta(days=USAGE_DAYS - 1), time(), tzinfo=UTC
    )
    if tenant is not None:
        to_date, this_month = billing_selectors.tenant_costs(tenant, now=now, since=month)
    else:
        every = billing_selectors.costs_by_tenant(now=now, since=month).values()
        to_date = sum((total for total, _ in every), Decimal(0))
        this_month = sum((recent for _, recent in every), Decimal(0))
    by_day = billing_selectors.usage(
        start=chart_start, end=now, group_by="package-day", now=now, tenant=tenant
    )
    return CostSummary(
        as_of=now,
        month_start=month,
        this_month=this_month,
        to_date=to_date,
        by_package_day={key: totals.cost for key, totals in by_day.groups.items()},
    )


def budget(tenant: Tenant, costs: CostSummary) -> budgets.Budget | None:
    """The tenant's monthly budget beside its cost figures (None: it has none)."""
    if tenant.monthly_budget is None:
        return None
    return budgets.budget_of(tenant, now=costs.as_of, spent=costs.this_month)


@dataclass(frozen=True)
class TenantCost:
    slug: str
    display_name: str
    this_month: Decimal
    to_date: Decimal


@dataclass(frozen=True)
class TenantCosts:
    """Every tenant's cost this month and to date (the operators' usage page)."""

    as_of: datetime
    month_start: datetime
    rows: list[TenantCost]
    this_month: Decimal
    to_date: Decimal


def list_tenant_costs(*, now: datetime) -> TenantCosts:
    """Every tenant, those without usage too, by slug (a fixed number of statements)."""
    month = periods.month_start(now)
    costs = billing_selectors.costs_by_tenant(now=now, since=month)
    nothing = (Decimal(0), Decimal(0))
    rows = [
        TenantCost(slug, display_name, costs.get(pk, nothing)[1], costs.get(pk, nothing)[0])
        for pk, slug, display_name in Tenant.objects.order_by("slug").values_list(
            "pk", "slug", "display_name"
        )
    ]
    return TenantCosts(
        as_of=now,
        month_start=month,
        rows=rows,
        this_month=sum((row.this_month for row in rows), Decimal(0)),
        to_date=sum((row.to_date for row in rows), Decimal(0)),
    )


def unit_price(unit: GPUUnit) -> Decimal | None:
    """What an hour of the unit costs now: its package's price (the interruptible one for an
    interruptible unit); None once the package is gone from the catalog."""
    package = Package.objects.filter(id=unit.package_id).first()
    return None if package is None else package.price_of(interruptible=unit.interruptible)
