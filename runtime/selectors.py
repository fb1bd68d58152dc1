"""Runtime reads. The ones behind customer requests take the tenant: another tenant's unit
simply does not exist for them."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from controlplane.validation import fold_case
from dracel import quantity
from inventory import preemption
from inventory.models import Device
from runtime import access
from runtime.errors import NotFound
from runtime.models import (
    GPUUnit,
    Operation,
    OperationStatus,
    Reservation,
    ReservationStatus,
    RunPolicy,
    UnitEvent,
    UnitPhase,
)
from tenancy.models import SSHKey, Tenant
from tenancy.selectors import TenantUsage


def list_units(
    *,
    tenant: Tenant,
    phase: str | None = None,
    package_id: str | None = None,
    region: str | None = None,
    include_terminated: bool = True,
) -> QuerySet[GPUUnit]:
    """The tenant's units (of `region`, when given); Terminated ones only with
    `include_terminated` or when `phase` asks for them."""
    units = GPUUnit.objects.filter(tenant=tenant).select_related("reservation")
    if phase:
        units = units.filter(phase=phase)
    elif not include_terminated:
        units = units.exclude(phase=UnitPhase.TERMINATED)
    if package_id:
        units = units.filter(package_id=fold_case(package_id.strip()))
    if region:
        units = units.filter(region=fold_case(region.strip()))
    return units


def lock_unit(*, tenant: Tenant, name: str, uid: str | None = None) -> GPUUnit:
    """The tenant's unit of that name (the newest), locked for the rest of the transaction, or
    with `uid` only that one: a page that shows one unit never acts on a newer unit of its
    name. NotFound when there is none."""
    units = GPUUnit.objects.select_for_update().filter(tenant=tenant, name=name)
    if uid is not None:
        units = units.filter(uid=uid)
    unit = units.order_by("-id").first()
    if unit is None:
        raise NotFound(f"gpu unit {name} not found.")
    unit.tenant = tenant
    return unit


def get_unit(*, tenant: Tenant, name: str) -> GPUUnit | None:
    """The live unit of that name, or else the most recent one that had it."""
    units = GPUUnit.objects.filter(tenant=tenant, name=fold_case(name.strip())).select_related(
        "reservation"
    )
    return units.live().first() or units.order_by("-id").first()


def list_unit_events(*, unit: GPUUnit) -> QuerySet[UnitEvent]:
    return UnitEvent.objects.filter(unit=unit).order_by("id")


def get_operation(*, tenant: Tenant, operation_id: str) -> Operation | None:
    return (
        Operation.objects.select_related("unit")
        .filter(tenant=tenant, operation_id=operation_id)
        .first()
    )


def name_in_use(*, tenant: Tenant, name: str) -> bool:
    """Whether one of the tenant's live units holds the name."""
    return GPUUnit.objects.live().filter(tenant=tenant, name=name).exists()


def count_tenant_usage(*, tenant: Tenant | None = None) -> dict[int, TenantUsage]:
    """What every tenant's (or one tenant's) live units hold, summed from the units themselves
    (`{tenant id: usage}`, tenants without live units left out): the truth the counters are
    checked against."""
    units = GPUUnit.objects.live()
    if tenant is not None:
        units = units.filter(tenant=tenant)
    charged = Q(compute_charged=True)  # a Stopped unit holds its claim, not CPU or memory
    rows = (
        units.values("tenant_id")
        .annotate(
            cpu=Coalesce(Sum("cpu_millicores", filter=charged), 0),
            memory=Coalesce(Sum("memory_bytes", filter=charged), 0),
            claims=Count("id"),
        )
        .values_list("tenant_id", "cpu", "memory", "claims")
    )
    return {tenant_id: TenantUsage(*usage) for tenant_id, *usage in rows}


def list_tenant_counters() -> QuerySet[Tenant]:
    """Every tenant with only its usage counters loaded (what recount_usage compares)."""
    return Tenant.objects.only("pk", "used_cpu_millicores", "used_memory_bytes", "used_claims")


def list_stale_operations(*, older_than: datetime, limit: int) -> list[Operation]:
    """Open operations nobody has touched since `older_than`, oldest first."""
    return list(
        Operation.objects.filter(status__in=OperationStatus.OPEN, updated_at__lt=older_than)
        .select_related("unit")
        .order_by("id")[:limit]
    )


# Phases a reconcile pass compares with the cluster (Accepted units have no objects yet).
_RECONCILED = (
    UnitPhase.PROVISIONING,
    UnitPhase.PENDING,
    UnitPhase.RUNNING,
    UnitPhase.FAILED,
    UnitPhase.STOPPING,
    *UnitPhase.AT_REST,
    UnitPhase.TERMINATING,
)


def list_units_to_reconcile(*, cluster: str) -> list[GPUUnit]:
    """`cluster`'s units whose objects exist (or are being deleted), with their tenants."""
    return [
        unit
        for unit in GPUUnit.objects.filter(cluster=cluster, phase__in=_RECONCILED).select_related(
            "tenant"
        )
        if unit.unit_k8s_uid or unit.phase == UnitPhase.TERMINATING
    ]


def list_units_to_reconcile_after(*, cluster: str, after: int, limit: int) -> list[GPUUnit]:
    """The first `limit` units of `cluster` to reconcile (as `list_units_to_reconcile` chooses
    them) whose pk is above `after`, by pk, with their tenants: a page of its backstop."""
    return list(
        GPUUnit.objects.filter(cluster=cluster, phase__in=_RECONCILED, pk__gt=after)
        .filter(~Q(unit_k8s_uid="") | Q(phase=UnitPhase.TERMINATING))
        .select_related("tenant")
        .order_by("pk")[:limit]
    )


def list_unit_uids(
    *, cluster: str, after: int = 0, upto: int | None = None
) -> QuerySet[GPUUnit, uuid.UUID]:
    """The uids of `cluster`'s units of any phase whose pk is in (after, upto] (`upto` None: no
    upper bound), as a subquery: the units a pass or page of its backstop answers for."""
    units = GPUUnit.objects.filter(cluster=cluster, pk__gt=after)
    if upto is not None:
        units = units.filter(pk__lte=upto)
    return units.values_list("uid", flat=True)


def list_live_units_by_key(keys: Iterable[tuple[str, str]], *, cluster: str) -> list[GPUUnit]:
    """The live units of `cluster` with these (namespace, name) keys, with their tenants, in
    one query whatever the number of units in the database (an object in another cluster
    that names a unit is never taken for it)."""
    wanted = set(keys)
    if not wanted:
        return []
    units = (
        GPUUnit.objects.live()
        .filter(
            cluster=cluster,
            namespace__in={namespace for namespace, _ in wanted},
            name__in={name for _, name in wanted},
        )
        .select_related("tenant")
    )
    return [unit for unit in units if (unit.namespace, unit.name) in wanted]


def count_units_by_phase() -> list[tuple[str, int]]:
    """(phase, count) of every phase but Terminated (one indexed aggregate)."""
    return list(
        GPUUnit.objects.exclude(phase=UnitPhase.TERMINATED)
        .values("phase")
        .annotate(count=Count("id"))
        .values_list("phase", "count")
        .order_by("phase")
    )


def count_operations_by_status() -> list[tuple[str, str, int]]:
    """(kind, status, count) of the open and the failed operations."""
    return list(
        Operation.objects.filter(status__in=[*OperationStatus.OPEN, OperationStatus.FAILED])
        .values("kind", "status")
        .annotate(count=Count("id"))
        .values_list("kind", "status", "count")
        .order_by("kind", "status")
    )


def live_units_with_mounts(*, tenant: Tenant) -> list[tuple[str, list[dict]]]:
    """(name, storage_mounts) of the tenant's live units that mount storage."""
    return list(
        GPUUnit.objects.filter(tenant=tenant)
        .exclude(phase=UnitPhase.TERMINATED)
        .exclude(storage_mounts=[])
        .values_list("name", "storage_mounts")
    )


def ssh_public_keys(unit: GPUUnit) -> list[str]:
    """The public key lines of the SSH keys the unit names that its tenant still has."""
    names = (unit.ssh or {}).get("keys") or []
    keys = SSHKey.objects.filter(tenant_id=unit.tenant_id, name__in=names).order_by("name")
    return list(keys.values_list("public_key", flat=True))


def units_using_ssh_key(*, tenant: Tenant, name: str) -> list[GPUUnit]:
    return list(
        GPUUnit.objects.filter(tenant=tenant, ssh__keys__contains=[name]).exclude(
            phase=UnitPhase.TERMINATED
        )
    )


def list_units_past_stop(*, now: datetime, limit: int) -> list[GPUUnit]:
    """Units whose stopAfter ran out by `now` and that run (or try to), oldest deadline
    first, with their tenants (the partial index unit_stops_at serves it)."""
    return list(
        GPUUnit.objects.filter(stops_at__lte=now, run_policy="Running")
        .exclude(
            phase__in=(
                UnitPhase.STOPPING,
                *UnitPhase.AT_REST,
                UnitPhase.TERMINATING,
                UnitPhase.TERMINATED,
            )
        )
        .select_related("tenant")
        .order_by("stops_at")[:limit]
    )


def list_units_idle_since(*, before: datetime, limit: int) -> list[GPUUnit]:
    """Units whose pods have held their devices since before `before` without a container
    started, and that are to run, longest first, with their tenants (the partial index
    unit_idle_hold_since serves it)."""
    return list(
        GPUUnit.objects.filter(idle_hold_since__lte=before, run_policy="Running")
        .exclude(phase__in=(UnitPhase.STOPPING, *UnitPhase.AT_REST, *UnitPhase.ENDING))
        .select_related("tenant")
        .order_by("idle_hold_since")[:limit]
    )


def devices_requested(*, tenant: Tenant, device_class: str) -> int:
    """Devices of `device_class` the tenant's live units' claims request (a stopped unit's
    claim too: it still exists)."""
    total = (
        GPUUnit.objects.live()
        .filter(tenant=tenant, device_class_name=device_class)
        .aggregate(total=Sum("count"))["total"]
    )
    return int(total or 0)


def reserved_devices(*, tenant: Tenant, device_class: str) -> int:
    """Devices of `device_class` the tenant's reservations hold (or will) beyond what their
    live units take: a reservation's free slots count against the device quota as units do.
    One query."""
    return reserved_devices_by(tenant=tenant, key="class").get(device_class, 0)


def reserved_devices_by(*, tenant: Tenant, key: str) -> dict[str, int]:
    """The devices of the tenant's reservations' free slots (no live unit of theirs takes
    them), per device class (`key` "class") or per region ("region"). One query."""
    group = "package__device_class_name" if key == "class" else "region"
    rows = (
        Reservation.objects.filter(
            tenant=tenant, status__in=(ReservationStatus.SCHEDULED, ReservationStatus.ACTIVE)
        )
        .annotate(
            live=Count(
                "units", filter=Q(units__phase__in=UnitPhase.LIVE, units__interruptible=False)
            )
        )
        .values_list(group, "count", "live", "package__count")
    )
    totals: dict[str, int] = {}
    for name, count, live, devices in rows:
        totals[name] = totals.get(name, 0) + max(count - live, 0) * devices
    return totals


def units_waiting_by_cluster(*, package_id: str) -> dict[str, int]:
    """Per cluster, the live units of `package_id` that hold no devices yet: ordered, being
    made, or Pending (placement takes them off what the inventory mirror says fits)."""
    rows = (
        GPUUnit.objects.filter(
            package_id=package_id,
            phase__in=(UnitPhase.ACCEPTED, UnitPhase.PROVISIONING, UnitPhase.PENDING),
        )
        .exclude(dra__allocated=True)  # a Pending unit starting on its devices: counted there
        .values("cluster")
        .annotate(n=Count("id"))
        .values_list("cluster", "n")
    )
    return dict(rows)


def devices_held_by_region(*, tenant: Tenant) -> dict[str, int]:
    """Devices the tenant's live units request, per region they were placed in (a stopped
    unit's too: it keeps its place), and its reservations' free slots there. Two queries."""
    rows = (
        GPUUnit.objects.live()
        .filter(tenant=tenant)
        .values("region")
        .annotate(total=Sum("count"))
        .values_list("region", "total")
    )
    held = reserved_devices_by(tenant=tenant, key="region")
    for name, total in rows:
        held[name] = held.get(name, 0) + int(total)
    return held


def devices_requested_by_class(*, tenant: Tenant) -> dict[str, int]:
    """Devices requested by the tenant's live units, and by its reservations' free slots,
    per device class (what its device quota counts). Two queries."""
    rows = (
        GPUUnit.objects.live()
        .filter(tenant=tenant)
        .values("device_class_name")
        .annotate(total=Sum("count"))
        .values_list("device_class_name", "total")
    )
    held = reserved_devices_by(tenant=tenant, key="class")
    for name, total in rows:
        held[name] = held.get(name, 0) + int(total)
    return held


def exposure_held(
    *, tenant: Tenant, config: access.AccessConfig, exclude_pk: int | None = None
) -> access.Exposure:
    """The NodePorts and load balancers the tenant's live units' Services hold (a stopped or
    pending unit's too: its Services stay), from the rows, not the cluster; but the unit
    `exclude_pk`. Only units with tcp access or SSH can hold any, so this reads at most as
    many rows as the tenant may have NodePorts."""
    units = GPUUnit.objects.live().filter(tenant=tenant)
    units = units.filter(Q(access__scheme="tcp") | Q(ssh__enabled=True)).order_by()
    if exclude_pk is not None:
        units = units.exclude(pk=exclude_pk)
    held = access.Exposure()
    for spec in units.values("template", "access", "ssh"):
        held += access.spec_exposure(spec, config)
    return held


def ephemeral_storage_requested(*, tenant: Tenant) -> int:
    """Bytes of ephemeral storage the pods of the tenant's live units that run (or try to)
    request: what its ResourceQuota counts (a stopped unit has no pod)."""
    amounts = (
        GPUUnit.objects.live()
        .filter(tenant=tenant, run_policy=RunPolicy.RUNNING)
        .exclude(ephemeral_storage="")
        .order_by()
        .values_list("ephemeral_storage", flat=True)
    )
    return sum(quantity.parse_bytes(amount) for amount in amounts)


# The phases of an interruptible unit that holds (or is about to hold) devices.
# A Failed interruptible unit whose pod still holds devices (a crash loop, an image that never
# pulls) gives way too, before the running ones (inventory/preemption.py).
PREEMPTIBLE_PHASES = (
    UnitPhase.PROVISIONING,
    UnitPhase.PENDING,
    UnitPhase.RUNNING,
    UnitPhase.FAILED,
)


def preemption_choice(*, cluster: str, package_id: str, count: int) -> preemption.Choice | None:
    """The interruptible units of `cluster` that would give way for a unit of `package_id`
    needing `count` devices (inventory.preemption), from the mirror: the devices the package
    can use, free or held by interruptible units not already giving way. None when it fits
    already or cannot fit even so. Two reads."""
    devices = Device.objects.filter(
        cluster=cluster, packages__contains=[package_id], pool_complete=True
    ).values_list("node_name", "allocated", "tainted", "claim_namespace", "claim_name")
    free: dict[str, int] = defaultdict(int)
    held: dict[tuple[str, str], list[str]] = defaultdict(list)  # claim -> its devices' nodes
    for node, allocated, tainted, namespace, claim in devices:
        if not allocated and not tainted:
            free[node] += 1
        elif allocated and claim:
            held[(namespace, claim)].append(node)
    if not held:
        return None
    holders = [
        preemption.Holder(
            uid=str(unit.uid),
            node=held[(unit.namespace, unit.claim_name)][0],
            started=unit.started_at or unit.created_at,
            devices=len(held[(unit.namespace, unit.claim_name)]),
            serving=unit.phase == UnitPhase.RUNNING and unit.idle_hold_since is None,
        )
        for unit in GPUUnit.objects.filter(
            cluster=cluster,
            interruptible=True,
            phase__in=PREEMPTIBLE_PHASES,
            preemption={},
            namespace__in={namespace for namespace, _ in held},
            claim_name__in={claim for _, claim in held},
        )
        if (unit.namespace, unit.claim_name) in held
    ]
    return preemption.choose(count, free, holders)
