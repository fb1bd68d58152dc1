"""Orders: a customer's create request becomes a unit, its operation and first timeline entry.

The create path is hand-written SQL (ARCHITECTURE §4): through the ORM's query building it
cost twice its database work (docs/benchmarks.md). The statements still speak in models
(controlplane/statements.py: column lists from the models' field metadata, rows back as model
instances), new rows pass `clean_fields()`, and `check_order_models` (a Django system check)
refuses model features the statements cannot carry, so a field added to a model either reaches
these statements or stops `manage.py check`. The one lock order of the create path: the tenant
row (FOR NO KEY UPDATE, as tenancy.services.lock_tenant takes it, the quota read under it), then
the unit's name through the insert's unique index. Not FOR UPDATE: that waits on the KEY SHARE
every insert naming the tenant takes (an action's operation, an audit row), and such a request
holding a unit's row while it waits for the tenant row deadlocked with an order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from django.conf import settings
from django.core import checks
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.db.models import Count, F, Q
from django.db.models.signals import post_save, pre_save
from django.utils import timezone

from catalog import selectors as catalog_selectors
from catalog.models import Package
from controlplane import statements
from controlplane.validation import dns_label
from dracel import quantity
from inventory import placement
from inventory import selectors as inventory_selectors
from inventory.models import PackageAvailability
from runtime import access as unit_access
from runtime import (
    lifecycle,
    manifests,
    outbox,
    selectors,
    stopafter,
    tenant_secrets,
    validation,
)
from runtime.access import host_label
from runtime.errors import (
    InsufficientCapacity,
    InvalidRequest,
    LimitExceeded,
    NameConflict,
    QuotaExceeded,
    RegionUnavailable,
    ReservationFull,
    StorageInUse,
)
from runtime.models import (
    EventType,
    GPUStorage,
    GPUUnit,
    Operation,
    OperationKind,
    Reservation,
    ReservationStatus,
    StoragePhase,
    UnitEvent,
    UnitPhase,
)
from tenancy import services as tenancy_services
from tenancy.models import SSHKey, Tenant
from tenancy.selectors import TenantUsage

M = TypeVar("M", bound=models.Model)

# Models whose new rows the order statement writes: what Model.save() would do for them beyond
# INSERTing their fields' values (database defaults, generated columns, signals) never happens.
WRITTEN_MODELS: tuple[type[models.Model], ...] = (GPUUnit, Operation, UnitEvent)

# The unique index that refuses an order a label a live unit holds: the order then tries the
# next candidate label, up to HOST_LABEL_CANDIDATES of them (each one taken would take a
# second preimage of a 65-bit hash: access._HASH_CHARS).
HOST_LABEL_CONSTRAINT = "unit_host_label_unique_while_live"
HOST_LABEL_CANDIDATES = 8


@dataclass(frozen=True)
class CreateResult:
    unit: GPUUnit
    created: bool


@dataclass
class Order:
    """A create request as the service takes it: the fields given, empty ones as empty."""

    tenant: Tenant
    operation_id: str
    name: str
    package_id: str
    image: str
    template: dict
    access: dict
    storage_mounts: list[dict]
    ssh: dict
    stop_after: str | None
    region: str
    interruptible: bool
    auto_resume: bool
    reservation: str

    def request_hash(self) -> str:
        """The hash a replay must match. Optional fields only when given: the hashes of
        orders made before a field existed stay what they were."""
        request: dict[str, Any] = {
            "operationID": self.operation_id,
            "name": self.name,
            "packageID": self.package_id,
            "image": self.image,
            "template": self.template,
        }
        optional = {
            "access": self.access,
            "storageMounts": self.storage_mounts,
            "ssh": self.ssh,
            "stopAfter": self.stop_after,
            "region": self.region,
            "interruptible": self.interruptible,
            "autoResume": self.auto_resume,
            "reservation": self.reservation,
        }
        request.update({key: value for key, value in optional.items() if value})
        return outbox.request_hash(request)


def create_unit(
    *,
    tenant: Tenant,
    operation_id: str,
    name: str,
    package_id: str,
    image: str,
    template: dict | None = None,
    access: dict | None = None,
    storage_mounts: list[dict] | None = None,
    ssh: dict | None = None,
    stop_after: str | None = None,
    region: str = "",
    interruptible: bool = False,
    auto_resume: bool = False,
    reservation: str = "",
) -> CreateResult:
    """Record a new unit, placed in a cluster (of `region`, when named), and its create
    operation, or return the unit an earlier identical request created (same operationID and
    payload; a different payload is a conflict). Provisioning is queued after commit. Nothing
    is written when the order is refused.

    The order passes a chain of admission checks, each refusing with its own error: the
    replay, the package (`_admit_package`), the secrets its env reads, the budget and the
    placement with its reservation
    slot (`_place_order`), the new rows' fields (`_new_rows`), then under the tenant's lock the
    quotas, limits, ports and storage (`ADMISSION_UNDER_LOCK`), and the one statement."""
    order = Order(
        tenant=tenant,
        operation_id=operation_id,
        name=name,
        package_id=package_id,
        image=image,
        template=template or {},
        access=access or {},
        storage_mounts=storage_mounts or [],
        ssh=ssh or {},
        stop_after=stop_after,
        region=region,
        interruptible=interruptible,
        auto_resume=auto_resume,
        reservation=reservation,
    )
    request_hash = order.request_hash()
    earlier, package = _lookup(tenant, operation_id, package_id)
    if earlier is not None:
        return _replayed(earlier, request_hash)
    admitted = _admit_package(order, package)
    tenant_secrets.check_references(tenant=tenant, template=order.template)
    held, placed = _place_order(order, admitted)
    if order.ssh:
        order.ssh = {"enabled": True, "keys": ssh_key_names(tenant, order.ssh.get("keys"))}
    rows = _new_rows(order, admitted, placed, held, request_hash)
    return _commit(order, rows, held, request_hash)


def _admit_package(order: Order, package: Package | None) -> Package:
    """The package is offered, and sold the way the order buys it."""
    if package is None:
        raise InvalidRequest(
            f'packageID "{order.package_id}" is not offered.',
            details={
                "fields": {"packageID": [catalog_selectors.unknown_package(order.package_id)]}
            },
        )
    if order.interruptible and not package.interruptible:
        raise InvalidRequest(
            f'package "{package.id}" is not sold as interruptible.',
            details={"fields": {"interruptible": ["This package is sold on demand only."]}},
        )
    if order.auto_resume and not order.interruptible:
        raise InvalidRequest(
            "autoResume applies to interruptible units only.",
            details={"fields": {"autoResume": ["Only an interruptible unit is preempted."]}},
        )
    return package


def _place_order(order: Order, package: Package) -> tuple[Reservation | None, placement.Placed]:
    """Where the unit goes, and the reservation whose devices it runs on (its own, or one an
    interruptible unit borrows), once the budget allows an order at all."""
    tenant, region, interruptible = order.tenant, order.region, order.interruptible
    held = (
        _reservation_for(tenant, order.reservation, package, interruptible)
        if order.reservation
        else None
    )
    tenancy_services.check_budget(tenant)
    if held is not None:  # where its devices are held
        if region and region != held.region:
            raise InvalidRequest(
                f'reservation "{held.name}" holds devices in region "{held.region}".',
                details={"fields": {"region": [f'The reservation is in "{held.region}".']}},
            )
        return held, placement.Placed(held.cluster, held.region)
    try:
        placed = place(
            package,
            region,
            tenant,
            within=bound_to(tenant, order.storage_mounts, order.template),
            reclaim=not interruptible,
        )
    except InsufficientCapacity:
        if not interruptible or (held := _lendable(package, region)) is None:
            raise
        return held, placement.Placed(held.cluster, held.region)
    if interruptible and not _room(placed.cluster, package.id):
        # Reserved devices nobody uses are lent to an interruptible unit, and taken back
        # (preempted) when the reservation's owner orders on them.
        held = _lendable(package, placed.region, cluster=placed.cluster)
    return held, placed


@dataclass
class _Rows:
    """What the order statement writes: the unit, its create operation, its first entry."""

    unit: GPUUnit
    operation: Operation
    event: UnitEvent


def _new_rows(
    order: Order,
    package: Package,
    placed: placement.Placed,
    held: Reservation | None,
    request_hash: str,
) -> _Rows:
    """The rows the order writes, their fields checked (a 400 naming the field at fault)."""
    tenant, name = order.tenant, order.name
    unit = GPUUnit(
        tenant=tenant,
        name=name,
        namespace=tenant.namespace,
        operation_id=order.operation_id,
        cluster=placed.cluster,
        region=placed.region,
        image=order.image,
        template=order.template,
        access=order.access,
        storage_mounts=order.storage_mounts,
        ssh=order.ssh,
        host_label=host_label(tenant.namespace, name),
        stop_after=stopafter.effective_stop_after(
            tenant, package.id, order.stop_after, package_max=package.max_stop_after
        ),
        started_at=timezone.now(),
        interruptible=order.interruptible,
        auto_resume=order.auto_resume,
        reservation=held,
        **GPUUnit.contract_fields(package, name=name),
    )
    unit.stops_at = stopafter.stops_at(unit)
    operation = Operation(
        tenant=tenant,
        operation_id=order.operation_id,
        kind=OperationKind.CREATE,
        request_hash=request_hash,
    )
    # A new unit has no timeline yet, so nothing to bump: its first entry is appended directly.
    event = UnitEvent(
        type=EventType.NORMAL, reason="Accepted", message=f"Ordered package {package.id}."
    )
    try:
        # Foreign keys are not checked here (that would cost a query each): the tenant row is
        # locked below and the unit is written by the same statement.
        unit.clean_fields(exclude=["tenant"])
        operation.clean_fields(exclude=["tenant", "unit"])
        event.clean_fields(exclude=["unit"])
    except ValidationError as exc:
        raise InvalidRequest(
            "The order does not fit the unit's fields.", details={"fields": exc.message_dict}
        ) from exc
    return _Rows(unit, operation, event)


# ---------------------------------------------------------------- admission under the tenant lock
# Each takes the order, its unit, the tenant's usage as locked and the reservation it runs on,
# and raises the refusal; they run in this order, after the tenant row is locked and before
# the statement, so two orders of one tenant never pass on the same room.


def _compute_quota(
    order: Order, unit: GPUUnit, usage: TenantUsage, held: Reservation | None
) -> None:
    if problem := tenancy_services.quota_problem(
        order.tenant, usage, cpu_millicores=unit.cpu_millicores, memory_bytes=unit.memory_bytes
    ):
        raise problem


def _slot_or_devices(
    order: Order, unit: GPUUnit, usage: TenantUsage, held: Reservation | None
) -> None:
    """Its reservation slot (taken under the reservation's row lock: the devices were counted
    against the quota when it was made), else the device quota; a borrower's slot is lent."""
    if held is not None and not order.interruptible:
        unit.reservation_slot = _take_slot(held)
    elif problem := device_quota_problem(order.tenant, unit.device_class_name, unit.count):
        raise problem
    elif held is not None:  # lent: a slot no unit takes, or none (placed as usual)
        unit.reservation_slot = _lend_slot(held)
        unit.reservation = held if unit.reservation_slot is not None else None


def _region_quota(
    order: Order, unit: GPUUnit, usage: TenantUsage, held: Reservation | None
) -> None:
    # A unit on its reservation's slot was counted there when the reservation was made.
    if (unit.reservation_slot is None or order.interruptible) and (
        problem := region_quota_problem(order.tenant, unit.region, unit.count)
    ):
        raise problem


def _ephemeral(order: Order, unit: GPUUnit, usage: TenantUsage, held: Reservation | None) -> None:
    if problem := ephemeral_storage_problem(order.tenant, unit.ephemeral_storage):
        raise problem


def _ports(order: Order, unit: GPUUnit, usage: TenantUsage, held: Reservation | None) -> None:
    # In the ORM, not the order statement: most orders open no port and pay nothing for it;
    # the tenant lock keeps two orders from one last port.
    check_exposure(
        order.tenant, {"template": order.template, "access": order.access, "ssh": order.ssh}
    )


def _storage(order: Order, unit: GPUUnit, usage: TenantUsage, held: Reservation | None) -> None:
    if order.storage_mounts:  # under the tenant lock: two orders cannot take one storage
        check_storage_mounts(order.tenant, order.storage_mounts, cluster=unit.cluster)


ADMISSION_UNDER_LOCK = (
    _compute_quota,
    _slot_or_devices,
    _region_quota,
    _ephemeral,
    _ports,
    _storage,
)


def _commit(order: Order, rows: _Rows, held: Reservation | None, request_hash: str) -> CreateResult:
    """Lock the tenant, admit the order (ADMISSION_UNDER_LOCK), write it in one statement and
    queue its provisioning after commit; a replay that committed first is answered as one."""
    tenant, unit, operation = order.tenant, rows.unit, rows.operation
    candidate = 0
    while True:
        try:
            with transaction.atomic(), statements.cursor() as sql:
                # Serialise orders per tenant: each sees the usage the one before it charged.
                sql.execute(
                    "SELECT used_cpu_millicores, used_memory_bytes, used_claims "
                    f"FROM {statements.table(Tenant)} WHERE id = %s FOR NO KEY UPDATE",
                    [tenant.pk],
                )
                usage = TenantUsage(*sql.fetchone())
                for check in ADMISSION_UNDER_LOCK:
                    check(order, unit, usage, held)
                sql.execute(
                    _order_sql(),
                    {
                        "unit": statements.row_json(unit),
                        "operation": statements.row_json(operation, skip=("unit",)),
                        "event": statements.row_json(rows.event, skip=("unit",)),
                        "cpu": unit.cpu_millicores,
                        "memory": unit.memory_bytes,
                        "tenant": tenant.pk,
                    },
                )
                unit_pk, operation_pk = sql.fetchone()
                statements.saved(unit, unit_pk)
                operation.unit = unit
                statements.saved(operation, operation_pk)
                transaction.on_commit(lambda: outbox.enqueue(operation))
        except (IntegrityError, QuotaExceeded, LimitExceeded) as exc:
            if _host_label_taken(exc):
                if candidate == HOST_LABEL_CANDIDATES:
                    raise  # every candidate is a live unit's: no name or quota problem
                # Another live unit's URL (practically never): the next label, decided by the
                # unique index again. A name or operationID taken as well fails the next try.
                candidate += 1
                unit.host_label = host_label(tenant.namespace, order.name, candidate)
                continue
            # An identical request that committed first (its operationID, or its unit's name, is
            # taken now) is a replay; the name being taken comes before a full quota or limit.
            replay = selectors.get_operation(tenant=tenant, operation_id=order.operation_id)
            if replay is not None:
                return _replayed(replay, request_hash)
            if isinstance(exc, IntegrityError) or selectors.name_in_use(
                tenant=tenant, name=order.name
            ):
                raise NameConflict(
                    f"gpu unit name {tenant.namespace}/{order.name} is already in use.",
                    details={"name": order.name},
                ) from None
            raise
        return CreateResult(unit=unit, created=True)


def place(
    package: Package,
    region: str,
    tenant: Tenant,
    *,
    within: dict[str, str] | None = None,
    reclaim: bool = False,
) -> placement.Placed:
    """The cluster a new unit of `package` goes to (inventory.placement), or the refusal;
    `within`: where what it mounts and reads lives (bound_to): there it must run."""
    room = None
    if tenant.quota_regions:  # a query only for a tenant with a quota per region
        held = selectors.devices_held_by_region(tenant=tenant)
        room = {name: hard - held.get(name, 0) for name, hard in tenant.quota_regions.items()}
    candidates = inventory_selectors.placement_candidates(package.id)
    if sum(1 for c in candidates if c.enabled) > 1:
        candidates = _less_what_waits(candidates, package.id)

    def decide(candidates: list[placement.Candidate]) -> placement.Placed | placement.Refused:
        return placement.place(
            candidates,
            package=package.id,
            sold_in=package.regions,
            region=region,
            devices=package.count,
            room=room,
            within=set(within.values()) if within else None,
        )

    decision = decide(candidates)
    if reclaim and isinstance(decision, placement.Refused) and decision.code == NO_ROOM:
        # An on-demand order: a cluster where interruptible units would make room takes it
        # too; it waits there (Pending) while they give way (runtime/control/preemption.py).
        decision = decide([_with_reclaimable(c, package) for c in candidates])
    if isinstance(decision, placement.Placed):
        return decision
    details = {"regions": decision.regions}
    if decision.code == "elsewhere" and within:
        raise InvalidRequest(
            decision.message,
            details={**details, "fields": _fields(within, _where(within, region))},
        )
    if decision.code == "quota_exceeded":
        raise QuotaExceeded(decision.message, details=details)
    if decision.code in ("unknown_region", "not_sold"):
        raise InvalidRequest(
            decision.message, details={**details, "fields": {"region": [decision.message]}}
        )
    if decision.code == "region_unavailable":
        raise RegionUnavailable(decision.message, details=details)
    raise InsufficientCapacity(decision.message, details=details)


# What a unit reads from its tenant's secrets lives in the process's own cluster: the web
# process writes each Secret there (runtime/tenant_secrets.py), so units that read one run there.
SECRETS = "its secrets"


def bound_to(
    tenant: Tenant, mounts: list[dict] | None, template: dict | None
) -> dict[str, str] | None:
    """Where what a unit needs lives: `{"storage NAME": its cluster, SECRETS: the own
    cluster}` for the storages it mounts and the secrets it reads (None when neither; a
    storage the tenant has none of is left to check_storage_mounts). A unit runs in one
    cluster, so they must share one: else a 400 naming them."""
    found: dict[str, str] = {}
    if mounts:
        names = [mount["name"] for mount in mounts]
        storages = GPUStorage.objects.filter(tenant=tenant, name__in=names)
        found = {
            f"storage {name}": cluster for name, cluster in storages.values_list("name", "cluster")
        }
    if validation.secret_refs(template):
        found[SECRETS] = settings.CLUSTER_NAME
    if not found:
        return None
    if len(set(found.values())) > 1:
        message = _where(found, "")
        raise InvalidRequest(
            "What a unit mounts and reads must live in one cluster.",
            details={"fields": _fields(found, message)},
        )
    return found


def _where(bound: dict[str, str], region: str) -> str:
    listed = ", ".join(f"{what} in cluster {cluster}" for what, cluster in sorted(bound.items()))
    asked = f' of region "{region}"' if region else ""
    return f"the unit runs where they live ({listed}), and no cluster{asked} can."


def _fields(bound: dict[str, str], message: str) -> dict[str, list[str]]:
    """The request's fields that bind a unit to a cluster, each with `message`."""
    fields = {}
    if any(what != SECRETS for what in bound):
        fields["storageMounts"] = [message]
    if SECRETS in bound:
        fields["template.env"] = [message]
    return fields


def _less_what_waits(
    candidates: list[placement.Candidate], package_id: str
) -> list[placement.Candidate]:
    """The candidates with what the mirror cannot know yet taken off: the units of the package
    placed in each cluster that hold no devices yet (ordered, being made or waiting to be
    allocated), one query. Without this, a burst of orders between two mirror updates would
    all go to the cluster that had the most room at the last one, and wait there while the
    other had room. (Units of other packages drawing on the same devices are not counted.)"""
    waiting = selectors.units_waiting_by_cluster(package_id=package_id)
    return [
        dataclasses.replace(c, placeable=max(0, c.placeable - waiting.get(c.name, 0)))
        for c in candidates
    ]


NO_ROOM = "insufficient_capacity"


def _with_reclaimable(candidate: placement.Candidate, package: Package) -> placement.Candidate:
    """The candidate with room for one unit when interruptible units there would make it."""
    if candidate.placeable > 0 or not candidate.enabled or candidate.unreachable:
        return candidate
    choice = selectors.preemption_choice(
        cluster=candidate.name, package_id=package.id, count=package.count
    )
    return candidate if choice is None else dataclasses.replace(candidate, placeable=1)


def _reservation_for(
    tenant: Tenant, name: str, package: Package, interruptible: bool
) -> Reservation:
    """The tenant's active reservation `name` an order lands on; 400 naming the field."""
    found = Reservation.objects.filter(tenant=tenant, name=name).first()
    problem = None
    if found is None:
        problem = "No reservation of yours has this name."
    elif found.status != ReservationStatus.ACTIVE:
        when = f"{found.start:%Y-%m-%d %H:%M:%S} UTC"
        problem = (
            f"It starts at {when}."
            if found.status == ReservationStatus.SCHEDULED
            else f"It is {found.status}."
        )
    elif found.package_id != package.id:
        raise InvalidRequest(
            f'reservation "{name}" holds package "{found.package_id}".',
            details={"fields": {"packageID": [f'The reservation holds "{found.package_id}".']}},
        )
    elif interruptible:
        problem = "A unit on a reservation is not interruptible."
    if problem is not None:
        raise InvalidRequest(
            f'reservation "{name}" cannot take this order: {problem}',
            details={"fields": {"reservation": [problem]}},
        )
    assert found is not None
    return found


def _slot_holders(reservation: Reservation) -> tuple[set[int], set[int]]:
    """The reservation's slots its owner's live units take, and those lent to interruptible
    units, its row locked until the order commits (concurrent orders take different slots)."""
    Reservation.objects.select_for_update().filter(pk=reservation.pk).exists()
    own: set[int] = set()
    lent: set[int] = set()
    for slot, interruptible in (
        GPUUnit.objects.live()
        .filter(reservation=reservation, reservation_slot__isnull=False)
        .values_list("reservation_slot", "interruptible")
    ):
        if slot is not None:
            (lent if interruptible else own).add(slot)
    return own, lent


def _take_slot(reservation: Reservation) -> int:
    """The lowest slot of the reservation its owner's units do not take, one nobody uses
    first (a lent one is taken back: runtime/control/preemption.py); 409 when all are taken."""
    own, lent = _slot_holders(reservation)
    free = [slot for slot in range(reservation.count) if slot not in own]
    if not free:
        raise ReservationFull(
            f"every slot of reservation {reservation.name} is taken ({reservation.count}).",
            details={"reservation": reservation.name, "count": reservation.count},
        )
    return min(free, key=lambda slot: (slot in lent, slot))


def _lend_slot(reservation: Reservation) -> int | None:
    """The lowest slot of the reservation no unit takes, to lend; None when there is none."""
    own, lent = _slot_holders(reservation)
    free = [slot for slot in range(reservation.count) if slot not in own | lent]
    return free[0] if free else None


def _room(cluster: str, package_id: str) -> bool:
    """Whether the mirror says a unit of the package fits the cluster now."""
    placeable = (
        PackageAvailability.objects.filter(cluster=cluster, package_id=package_id)
        .values_list("placeable", flat=True)
        .first()
    )
    return bool(placeable)


def _lendable(package: Package, region: str, *, cluster: str = "") -> Reservation | None:
    """An active reservation of the package (in the region or cluster asked) with a slot no
    unit takes, whose placeholder holds devices: an interruptible unit may run there until
    the owner needs it."""
    candidates = (
        Reservation.objects.filter(status=ReservationStatus.ACTIVE, package=package, held__gt=0)
        .annotate(
            taken=Count(
                "units",
                filter=Q(units__phase__in=UnitPhase.LIVE, units__reservation_slot__isnull=False),
            )
        )
        .filter(taken__lt=F("count"))
        .order_by("start", "id")
    )
    if region:
        candidates = candidates.filter(region=region)
    if cluster:
        candidates = candidates.filter(cluster=cluster)
    return candidates.first()


def place_again(unit: GPUUnit, *, why: str) -> placement.Placed | None:
    """Another cluster of the unit's region for a unit its cluster refused to make before
    anything of it existed there (ARCHITECTURE §20: placed again before, never after), moved
    there with a timeline warning and its create operation sent again to that cluster's queue.
    None, with nothing changed, when no other cluster of the region takes it, or the unit
    mounts storages or reads secrets (bound_to: they live in the cluster that refused): the
    caller fails the unit."""
    if unit.storage_mounts or validation.secret_refs(unit.template) or unit.reservation_id:
        return None
    refused = [*unit.clusters_refused, unit.cluster]
    decision = placement.place(
        [
            candidate
            for candidate in inventory_selectors.placement_candidates(unit.package_id)
            if candidate.name not in refused
        ],
        package=unit.package_id,
        sold_in=[],
        region=unit.region,
        devices=unit.count,
    )
    if not isinstance(decision, placement.Placed):
        return None
    with transaction.atomic():
        # Only while nothing of it was made and it was not deleted meanwhile.
        moved = GPUUnit.objects.filter(
            pk=unit.pk,
            cluster=unit.cluster,
            unit_k8s_uid="",
            phase__in=(UnitPhase.ACCEPTED, UnitPhase.PROVISIONING),
        ).update(cluster=decision.cluster, region=decision.region, clusters_refused=refused)
        if not moved:
            return None
        lifecycle.append_event(
            unit,
            reason="ClusterRefused",
            message=f"Cluster {unit.cluster} refused to make it ({why}); placed again in "
            f"cluster {decision.cluster} of region {decision.region}.",
            type=EventType.WARNING,
        )
        unit.cluster, unit.region, unit.clusters_refused = (
            decision.cluster,
            decision.region,
            refused,
        )
        outbox.send_again(unit)
    return decision


def _host_label_taken(exc: Exception) -> bool:
    """Whether an order's unique violation is its host label's, not its name's or
    operationID's (the database names the index it was refused by)."""
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None) == HOST_LABEL_CONSTRAINT


def _replayed(operation: Operation, request_hash: str) -> CreateResult:
    """The unit of an earlier identical request; a different request under the same
    operationID is a conflict."""
    outbox.check_replay(operation, kind=OperationKind.CREATE, request_hash=request_hash)
    return CreateResult(unit=operation.unit, created=False)


def device_quota_problem(tenant: Tenant, device_class: str, count: int) -> QuotaExceeded | None:
    """Why `count` more devices of `device_class` do not fit the tenant's device quota for
    that class (checked under the tenant lock), or None. Every live unit's claim counts, a
    stopped one's too, as the ResourceQuota counts claims, and so does every slot of the
    tenant's reservations no unit takes. No query for a class without one."""
    hard = (tenant.quota_devices or {}).get(device_class)
    if hard is None:
        return None
    used = selectors.devices_requested(
        tenant=tenant, device_class=device_class
    ) + selectors.reserved_devices(tenant=tenant, device_class=device_class)
    if used + count <= hard:
        return None
    return tenancy_services.quota_exceeded(
        tenant,
        f"{device_class}{manifests.DEVICE_QUOTA_SUFFIX}",
        used=str(used),
        requested=str(count),
        hard=str(hard),
        larger=count > hard,
    )


def region_quota_problem(tenant: Tenant, region: str, count: int) -> QuotaExceeded | None:
    """Why `count` more devices in `region` do not fit the tenant's quota there (placement
    chose the region with room; this, under the tenant lock, keeps two orders from one last
    device), or None. Live units count, and so do the free slots of the tenant's reservations
    there. No query for a region without one."""
    hard = (tenant.quota_regions or {}).get(region)
    if hard is None:
        return None
    used = selectors.devices_held_by_region(tenant=tenant).get(region, 0)
    if used + count <= hard:
        return None
    return tenancy_services.quota_exceeded(
        tenant,
        f"devices in region {region}",
        used=str(used),
        requested=str(count),
        hard=str(hard),
        larger=count > hard,
    )


def ephemeral_storage_problem(tenant: Tenant, amount: str) -> QuotaExceeded | None:
    """A unit whose pod alone asks for more ephemeral storage than the tenant's ResourceQuota
    allows (`Tenant.quota_ephemeral_storage`) could never start: refused (a query only then).
    The sum over running pods is the ResourceQuota's to keep (a pod past it is
    Pending/QuotaExceeded), so an order that fits pays nothing for this."""
    if not amount or quantity.parse_bytes(amount) <= tenant.quota_ephemeral_storage_bytes:
        return None
    return tenancy_services.quota_exceeded(
        tenant,
        "limits.ephemeral-storage",
        used=quantity.format_bytes(selectors.ephemeral_storage_requested(tenant=tenant)),
        requested=amount,
        hard=tenant.quota_ephemeral_storage,
        larger=True,
    )


# The allowances an order or update is held to: (name in GET /quota and the error's details,
# the ResourceQuota key, the Exposure field, the setting).
_EXPOSURE_LIMITS = (
    ("nodePorts", "services.nodeports", "node_ports", "NODE_PORTS_PER_TENANT"),
    ("loadBalancers", "services.loadbalancers", "load_balancers", "LOAD_BALANCERS_PER_TENANT"),
)


def check_exposure(tenant: Tenant, spec: dict, *, before: GPUUnit | None = None) -> None:
    """Refuse (409 `limit_exceeded`, naming the limit) a unit whose `spec` (its template,
    access and ssh) would have Services take the tenant past its NodePorts or load
    balancers, before anything is written or created. `before`: the unit as it is, for an
    update (only what it adds is asked for, so an update that opens no more ports passes
    even over a lowered allowance). Under the tenant lock; no query unless the unit takes
    more than it held."""
    config = unit_access.from_settings()
    wanted = unit_access.spec_exposure(spec, config)
    had = unit_access.Exposure()
    if before is not None:
        had = unit_access.spec_exposure(
            {"template": before.template, "access": before.access, "ssh": before.ssh}, config
        )
    grows = [
        limit for limit in _EXPOSURE_LIMITS if getattr(wanted, limit[2]) > getattr(had, limit[2])
    ]
    if not grows:
        return
    others = selectors.exposure_held(
        tenant=tenant, config=config, exclude_pk=before.pk if before is not None else None
    )
    for name, key, field, setting in grows:
        hard = getattr(settings, setting)
        used = getattr(others, field) + getattr(had, field)
        requested = getattr(wanted, field) - getattr(had, field)
        if used + requested <= hard:
            continue
        raise LimitExceeded(
            f"tenant {tenant.slug}'s units hold {used} of its {hard} {key} and this unit "
            f"needs {requested} more: delete a unit with tcp access or SSH, or use fewer "
            "ports.",
            details={"limit": name, "used": used, "requested": requested, "hard": hard},
        )


def _lookup(
    tenant: Tenant, operation_id: str, package_id: str
) -> tuple[Operation | None, Package | None]:
    """The operation already recorded under this operationID and the active package, in one
    statement (the create path's only one before the tenant lock)."""
    if dns_label(package_id):
        package_id = ""  # cannot be a package: matches nothing
    operations, packages = statements.table(Operation), statements.table(Package)
    with statements.cursor() as sql:
        sql.execute(
            f"SELECT {statements.select_list(Operation, 'o')}, "
            f"{statements.select_list(Package, 'p')} FROM (VALUES (1)) AS one (x) "
            f"LEFT JOIN {operations} o ON o.tenant_id = %s AND o.operation_id = %s "
            f"LEFT JOIN {packages} p ON p.id = %s AND p.active",
            [tenant.pk, operation_id, package_id],
        )
        row = sql.fetchone()
    return statements.from_row(Operation, row), statements.from_row(
        Package, row, statements.width(Operation)
    )


@cache
def _order_sql() -> str:
    """The order itself, one statement run under the tenant row lock once the quota check
    passed: the unit, its operation and first timeline entry, and the tenant charged for it.
    Each row travels as one JSON parameter, so the text never changes and the server reuses
    its plan. A name, host label or operationID taken meanwhile ends in a unique violation, and
    nothing is written."""
    unit = statements.insert_columns(GPUUnit)
    operation = statements.insert_columns(Operation, skip=("unit",))
    event = statements.insert_columns(UnitEvent, skip=("unit",))
    return f"""
WITH new_unit AS (
    INSERT INTO {statements.table(GPUUnit)} ({unit})
    SELECT {unit} FROM jsonb_populate_record(NULL::{statements.table(GPUUnit)}, %(unit)s::jsonb)
    RETURNING id
), new_operation AS (
    INSERT INTO {statements.table(Operation)} ({operation}, unit_id)
    SELECT {operation}, new_unit.id
    FROM jsonb_populate_record(NULL::{statements.table(Operation)}, %(operation)s::jsonb), new_unit
    RETURNING id
), new_event AS (
    INSERT INTO {statements.table(UnitEvent)} ({event}, unit_id)
    SELECT {event}, new_unit.id
    FROM jsonb_populate_record(NULL::{statements.table(UnitEvent)}, %(event)s::jsonb), new_unit
), charge AS (
    UPDATE {statements.table(Tenant)}
    SET used_cpu_millicores = used_cpu_millicores + %(cpu)s,
        used_memory_bytes = used_memory_bytes + %(memory)s,
        used_claims = used_claims + 1
    WHERE id = %(tenant)s
)
SELECT new_unit.id, new_operation.id FROM new_unit, new_operation
"""


def check_order_models(
    app_configs: Any = None,
    *,
    written: Sequence[type[models.Model]] = WRITTEN_MODELS,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """System check: the models the order writes have nothing the statement would skip."""
    errors: list[checks.CheckMessage] = []
    for model in written:
        label = model._meta.label
        for field in model._meta.concrete_fields:
            if isinstance(field, models.GeneratedField):
                errors.append(
                    checks.Error(
                        f"{label}.{field.name} is a GeneratedField; runtime/orders.py writes "
                        f"{label} rows by hand and cannot leave generated columns out.",
                        obj=field,
                        id="runtime.E001",
                    )
                )
            elif field.has_db_default():
                errors.append(
                    checks.Error(
                        f"{label}.{field.name} has a db_default; runtime/orders.py writes {label} "
                        "rows by hand and would store the expression object instead. Use a "
                        "Python default.",
                        obj=field,
                        id="runtime.E002",
                    )
                )
        for signal, signal_name in ((pre_save, "pre_save"), (post_save, "post_save")):
            if signal.has_listeners(model):
                errors.append(
                    checks.Error(
                        f"{label} has {signal_name} receivers; runtime/orders.py writes {label} "
                        "rows by hand and never sends the signal. Do the work in the service "
                        "instead.",
                        obj=model,
                        id="runtime.E003",
                    )
                )
    return errors


def check_storage_mounts(
    tenant: Tenant, mounts: list[dict], *, cluster: str, exclude: GPUUnit | None = None
) -> None:
    """Every mounted storage is the tenant's, usable and in `cluster` (the unit's), and none
    that only one live unit may mount is mounted by another (than `exclude`, the unit being
    updated): 400 naming the mount, 409 `storage_in_use`."""
    names = [mount["name"] for mount in mounts]
    found = {s.name: s for s in GPUStorage.objects.filter(tenant=tenant, name__in=names)}
    problems = {}
    for index, name in enumerate(names):
        storage = found.get(name)
        if storage is None:
            problems[f"storageMounts[{index}].name"] = [f"the tenant has no storage {name}."]
        elif storage.phase in (StoragePhase.TERMINATING, StoragePhase.FAILED):
            problems[f"storageMounts[{index}].name"] = [
                f"storage {name} is {storage.phase.lower()}: {storage.message}"
            ]
        elif storage.cluster != cluster:
            problems[f"storageMounts[{index}].name"] = [
                f"storage {name} lives in cluster {storage.cluster} (region {storage.region}); "
                f"the unit runs in cluster {cluster}."
            ]
    if problems:
        raise InvalidRequest("A storage mount is invalid.", details={"fields": problems})
    for name in names:
        if not found[name].exclusive:
            continue
        others = GPUUnit.objects.live().filter(
            tenant=tenant, storage_mounts__contains=[{"name": name}]
        )
        if exclude is not None:
            others = others.exclude(pk=exclude.pk)
        holders = list(others.values_list("name", flat=True))
        if holders:
            raise StorageInUse(
                f"storage {name} ({found[name].access_mode}) is mounted by {holders[0]}: one "
                "live unit at a time.",
                details={"storage": name, "units": holders},
            )


def ssh_key_names(tenant: Tenant, wanted: list[str] | None) -> list[str]:
    """The tenant's SSH keys a unit gets: the named ones (each must exist), or all of them;
    400 when SSH is enabled and there is none to give."""
    keys = SSHKey.objects.filter(tenant=tenant).order_by("name")
    have = list(keys.values_list("name", flat=True))
    if wanted is None:
        if not have:
            raise InvalidRequest(
                "SSH is enabled but the tenant has no SSH key: register one (POST /ssh-keys).",
                details={"fields": {"ssh": ["the tenant has no SSH key."]}},
            )
        return have
    problems = {
        f"ssh.keys[{index}]": [f"the tenant has no SSH key {name}."]
        for index, name in enumerate(wanted)
        if name not in have
    }
    if problems:
        raise InvalidRequest("An SSH key is unknown.", details={"fields": problems})
    return list(wanted)
