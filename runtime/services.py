"""Runtime writes on the database side: orders, deletions, phase transitions, timelines.

Cluster work happens in runtime/provisioning.py, queued from here after commit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime
from functools import cache

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from catalog import validation as catalog_validation
from catalog.models import Package
from controlplane import sql
from dracel import quantity
from runtime import manifests, selectors, validation
from runtime.errors import (
    InsufficientCapacity,
    InvalidRequest,
    NameConflict,
    NotFound,
    OperationConflict,
)
from runtime.models import (
    ApiKey,
    EventType,
    GPUUnit,
    Operation,
    OperationKind,
    OperationStatus,
    Tenant,
    UnitEvent,
    UnitPhase,
)

logger = logging.getLogger(__name__)

KEY_PREFIX = "gcp"


# --- API keys ---------------------------------------------------------------------------


def hash_key(key: str) -> str:
    # Keys are 256-bit random secrets, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(*, tenant: Tenant, name: str = "") -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is never stored and never shown again."""
    prefix = secrets.token_hex(6)
    key = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    api_key = ApiKey(tenant=tenant, name=name, prefix=prefix, key_hash=hash_key(key))
    api_key.full_clean()
    api_key.save()
    return api_key, key


def revoke_api_key(*, api_key: ApiKey) -> None:
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


@transaction.atomic
def create_tenant(
    *,
    slug: str,
    namespace: str,
    display_name: str = "",
    quota_cpu: str = "160",
    quota_memory: str = "256Gi",
    quota_claims: int = 64,
    is_operator: bool = False,
) -> Tenant:
    tenant = Tenant(
        slug=slug,
        namespace=namespace,
        display_name=display_name,
        quota_cpu=quota_cpu,
        quota_memory=quota_memory,
        quota_claims=quota_claims,
        is_operator=is_operator,
    )
    tenant.full_clean()
    tenant.save()
    return tenant


# --- timeline and phases ----------------------------------------------------------------


def record_event(
    unit: GPUUnit, *, reason: str, message: str = "", type: str = EventType.NORMAL
) -> UnitEvent:
    """Append to the unit's timeline; the same reason and message as the latest entry bumps it."""
    latest = UnitEvent.objects.filter(unit=unit).order_by("-id").first()
    now = timezone.now()
    if latest and latest.reason == reason and latest.message == message and latest.type == type:
        UnitEvent.objects.filter(pk=latest.pk).update(count=F("count") + 1, last_seen=now)
        latest.count += 1
        latest.last_seen = now
        return latest
    return UnitEvent.objects.create(unit=unit, type=type, reason=reason, message=message)


def transition_unit(
    unit: GPUUnit,
    *,
    to: str,
    reason: str = "",
    message: str = "",
    allowed_from: frozenset[str] | set[str] | None = None,
    event_type: str = EventType.NORMAL,
    **fields,
) -> bool:
    """Move a unit to phase `to` only if it is still in the phase we read (or one of
    `allowed_from`); record the change on its timeline. Returns False if someone else won."""
    sources = allowed_from if allowed_from is not None else {unit.phase}
    now = timezone.now()
    updated = GPUUnit.objects.filter(pk=unit.pk, phase__in=sources).update(
        phase=to, reason=reason, message=message, updated_at=now, **fields
    )
    if not updated:
        return False
    changed = unit.phase != to or unit.reason != reason
    unit.phase, unit.reason, unit.message, unit.updated_at = to, reason, message, now
    for name, value in fields.items():
        setattr(unit, name, value)
    if changed:
        record_event(unit, reason=reason or to, message=message, type=event_type)
    return True


# --- orders ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateResult:
    unit: GPUUnit
    created: bool


def fingerprint(payload: dict) -> str:
    """SHA-256 over canonical JSON: key order and whitespace never change the hash."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _replayed(operation: Operation, operation_id: str, request_hash: str) -> CreateResult:
    """The unit of an earlier identical request; a different request under the same
    operationID is a conflict."""
    if operation.kind != OperationKind.CREATE or operation.fingerprint != request_hash:
        raise OperationConflict(
            f"operation {operation_id} already exists with a different request payload.",
            details={"operationID": operation_id},
        )
    return CreateResult(unit=GPUUnit.objects.get(pk=operation.unit_id), created=False)


def _replay(tenant: Tenant, operation_id: str, request_hash: str) -> CreateResult | None:
    operation = Operation.objects.filter(tenant=tenant, operation_id=operation_id).first()
    return None if operation is None else _replayed(operation, operation_id, request_hash)


def _quota_problem(
    tenant: Tenant, usage: selectors.TenantUsage, *, cpu_millicores: int, memory_bytes: int
) -> InsufficientCapacity | None:
    """Why the tenant's live units plus the new one do not fit its quota (checked under the
    tenant lock), or None when they do."""
    checks = [
        (
            "requests.cpu",
            usage.cpu_millicores,
            cpu_millicores,
            tenant.quota_cpu_millicores,
            quantity.format_cpu,
        ),
        (
            "requests.memory",
            usage.memory_bytes,
            memory_bytes,
            tenant.quota_memory_bytes,
            quantity.format_bytes,
        ),
        ("count/resourceclaims.resource.k8s.io", usage.claims, 1, tenant.quota_claims, str),
    ]
    for limit, used, requested, hard, show in checks:
        if used + requested > hard:
            return InsufficientCapacity(
                f"tenant {tenant.slug} quota would be exceeded for {limit}: "
                f"used={show(used)} requested={show(requested)} hard={show(hard)}",
                details={
                    "limit": limit,
                    "used": show(used),
                    "requested": show(requested),
                    "hard": show(hard),
                },
            )
    return None


@cache
def _order_sql() -> str:
    """The order itself, one statement run under the tenant row lock once the quota check
    passed: the unit, its operation and first timeline entry, and the tenant charged for it.
    Each row travels as one JSON parameter, so the text never changes and psycopg reuses its
    parsed form; building it with the ORM cost more than the database work (docs/benchmarks.md).
    A name or operationID taken meanwhile ends in a unique violation, and nothing is written."""
    unit = sql.insert_columns(GPUUnit)
    operation = sql.insert_columns(Operation, skip=("unit",))
    event = sql.insert_columns(UnitEvent, skip=("unit",))
    return f"""
WITH new_unit AS (
    INSERT INTO {sql.table(GPUUnit)} ({unit})
    SELECT {unit} FROM jsonb_populate_record(NULL::{sql.table(GPUUnit)}, %(unit)s::jsonb)
    RETURNING id
), new_operation AS (
    INSERT INTO {sql.table(Operation)} ({operation}, unit_id)
    SELECT {operation}, new_unit.id
    FROM jsonb_populate_record(NULL::{sql.table(Operation)}, %(operation)s::jsonb), new_unit
    RETURNING id
), new_event AS (
    INSERT INTO {sql.table(UnitEvent)} ({event}, unit_id)
    SELECT {event}, new_unit.id
    FROM jsonb_populate_record(NULL::{sql.table(UnitEvent)}, %(event)s::jsonb), new_unit
), charge AS (
    UPDATE {sql.table(Tenant)}
    SET used_cpu_millicores = used_cpu_millicores + %(cpu)s,
        used_memory_bytes = used_memory_bytes + %(memory)s,
        used_claims = used_claims + 1
    WHERE id = %(tenant)s
)
SELECT new_unit.id, new_operation.id FROM new_unit, new_operation
"""


def _lookup(
    tenant: Tenant, operation_id: str, package_id: str
) -> tuple[Operation | None, Package | None]:
    """The operation already recorded under this operationID and the active package, in one
    statement (the create path's only one before the tenant lock)."""
    if catalog_validation.dns_label(package_id):
        package_id = ""  # cannot be a package: matches nothing
    with sql.cursor() as cursor:
        cursor.execute(
            f"SELECT {sql.select_list(Operation, 'o')}, {sql.select_list(Package, 'p')} "
            "FROM (VALUES (1)) AS one (x) "
            f"LEFT JOIN {sql.table(Operation)} o ON o.tenant_id = %s AND o.operation_id = %s "
            f"LEFT JOIN {sql.table(Package)} p ON p.id = %s AND p.active",
            [tenant.pk, operation_id, package_id],
        )
        row = cursor.fetchone()
    return sql.from_row(Operation, row), sql.from_row(Package, row, sql.width(Operation))


def create_unit(
    *,
    tenant: Tenant,
    operation_id: str,
    name: str,
    package_id: str,
    image: str,
    template: dict | None = None,
) -> CreateResult:
    """Record a new unit and its create operation, or return the unit an earlier identical
    request created. Provisioning is queued after commit."""
    template = template or {}
    request_hash = fingerprint(
        {
            "operationID": operation_id,
            "name": name,
            "packageID": package_id,
            "image": image,
            "template": template,
        }
    )
    earlier, package = _lookup(tenant, operation_id, package_id)
    if earlier is not None:
        return _replayed(earlier, operation_id, request_hash)
    if package is None:
        raise InvalidRequest(
            f'packageID "{package_id}" is not offered.',
            details={"fields": {"packageID": ["Unknown or inactive package."]}},
        )
    cpu_millicores, memory_bytes = package.cpu_millicores, package.memory_bytes
    claim_name = manifests.claim_name_for(name)
    unit = GPUUnit(
        tenant=tenant,
        name=name,
        namespace=tenant.namespace,
        operation_id=operation_id,
        package_id=package.id,
        spec_name=package.spec_name,
        cpu=package.cpu,
        memory=package.memory,
        cpu_millicores=cpu_millicores,
        memory_bytes=memory_bytes,
        gpu=package.gpu,
        device_class_name=package.device_class_name,
        claim_name=claim_name,
        claim_request_name=package.claim_request_name,
        count=package.count,
        selectors=list(package.selectors),
        capacity=dict(package.capacity),
        image=image,
        template=template,
        dra={"claimName": claim_name, "allocated": False, "devices": []},
    )
    operation = Operation(
        tenant=tenant,
        operation_id=operation_id,
        kind=OperationKind.CREATE,
        fingerprint=request_hash,
    )
    # A new unit has no timeline yet, so nothing to bump: its first entry is appended directly.
    event = UnitEvent(
        type=EventType.NORMAL, reason="Accepted", message=f"Ordered package {package.id}."
    )
    params = {
        "unit": sql.row_json(unit),
        "operation": sql.row_json(operation, skip=("unit",)),
        "event": sql.row_json(event, skip=("unit",)),
        "cpu": cpu_millicores,
        "memory": memory_bytes,
        "tenant": tenant.pk,
    }
    try:
        with transaction.atomic(), sql.cursor() as cursor:
            # Serialise orders per tenant: each sees the usage the one before it charged.
            cursor.execute(
                "SELECT used_cpu_millicores, used_memory_bytes, used_claims "
                f"FROM {sql.table(Tenant)} WHERE id = %s FOR UPDATE",
                [tenant.pk],
            )
            usage = selectors.TenantUsage(*cursor.fetchone())
            if problem := _quota_problem(
                tenant, usage, cpu_millicores=cpu_millicores, memory_bytes=memory_bytes
            ):
                raise problem
            cursor.execute(_order_sql(), params)
            unit_pk, operation_pk = cursor.fetchone()
            sql.saved(unit, unit_pk)
            operation.unit = unit
            sql.saved(operation, operation_pk)
            transaction.on_commit(lambda: enqueue(operation))
    except (IntegrityError, InsufficientCapacity) as exc:
        # An identical request that committed first (its operationID, or its unit's name, is
        # taken now) is a replay; the name being taken comes before a full quota.
        replay = _replay(tenant, operation_id, request_hash)
        if replay:
            return replay
        if isinstance(exc, IntegrityError) or selectors.name_in_use(tenant=tenant, name=name):
            raise NameConflict(
                f"gpu unit name {tenant.namespace}/{name} is already in use.",
                details={"name": name},
            ) from None
        raise
    return CreateResult(unit=unit, created=True)


def terminate(unit: GPUUnit, *, reason: str, message: str, **fields) -> bool:
    """Move a Terminating unit to Terminated and give its share of the quota back, in one
    transaction. The tenant row is locked first, as orders do, so an order waiting on this
    unit's name never holds the lock this needs."""
    with transaction.atomic():
        list(Tenant.objects.select_for_update().filter(pk=unit.tenant_id).values_list("pk"))
        terminated = transition_unit(
            unit,
            to=UnitPhase.TERMINATED,
            reason=reason,
            message=message,
            allowed_from={UnitPhase.TERMINATING},
            terminated_at=timezone.now(),
            **fields,
        )
        if terminated:
            Tenant.objects.filter(pk=unit.tenant_id).update(
                used_cpu_millicores=F("used_cpu_millicores") - unit.cpu_millicores,
                used_memory_bytes=F("used_memory_bytes") - unit.memory_bytes,
                used_claims=F("used_claims") - 1,
            )
    return terminated


def recount_usage() -> list[str]:
    """Set the usage counters of tenants whose counters disagree with their live units (a
    bug, or units written outside the order path) to what the units hold; returns their slugs.
    Counters are compared without locks, so an order committing in between only costs a
    recount under the tenant lock, which finds nothing to fix."""
    counted = selectors.count_tenant_usage()
    nothing = selectors.TenantUsage(0, 0, 0)
    suspects = [
        pk
        for pk, *charged in Tenant.objects.values_list(
            "pk", "used_cpu_millicores", "used_memory_bytes", "used_claims"
        )
        if selectors.TenantUsage(*charged) != counted.get(pk, nothing)
    ]
    fixed = []
    for pk in suspects:
        with transaction.atomic():
            tenant = Tenant.objects.select_for_update().get(pk=pk)
            # A statement after the lock: it sees every order committed before it.
            usage = selectors.count_tenant_usage(tenant=tenant).get(pk, nothing)
            charged = selectors.usage_of(tenant)
            if usage == charged:
                continue
            Tenant.objects.filter(pk=pk).update(
                used_cpu_millicores=usage.cpu_millicores,
                used_memory_bytes=usage.memory_bytes,
                used_claims=usage.claims,
            )
            logger.warning("tenant %s usage recounted: %s -> %s", tenant.slug, charged, usage)
            fixed.append(tenant.slug)
    return fixed


def request_unit_deletion(*, tenant: Tenant, name: str, uid: str | None = None) -> GPUUnit:
    """Mark the unit Terminating and queue its teardown. Repeating it changes nothing. With
    `uid`, only that unit: a page that shows one unit never deletes a newer one of its name."""
    with transaction.atomic():
        units = GPUUnit.objects.select_for_update().filter(tenant=tenant, name=name)
        if uid is not None:
            units = units.filter(uid=uid)
        unit = units.order_by("-id").first()
        if unit is None:
            raise NotFound(f"gpu unit {name} not found.")
        if unit.phase in (UnitPhase.TERMINATING, UnitPhase.TERMINATED):
            return unit
        operation = Operation.objects.create(
            tenant=tenant,
            operation_id=delete_operation_id(unit),
            kind=OperationKind.DELETE,
            fingerprint=fingerprint({"delete": str(unit.uid)}),
            unit=unit,
        )
        transition_unit(
            unit,
            to=UnitPhase.TERMINATING,
            reason="DeletionRequested",
            message="Deletion requested.",
        )
        transaction.on_commit(lambda: enqueue(operation))
    return unit


def delete_operation_id(unit: GPUUnit) -> str:
    return f"{validation.DELETE_OPERATION_PREFIX}{unit.uid}"


# --- operations -------------------------------------------------------------------------


def enqueue(operation: Operation) -> None:
    """Hand the operation to a worker. If the broker is down the operation stays pending in
    the database and sweep_operations sends it later, so the caller's request still succeeds."""
    from runtime import tasks

    task = tasks.provision_unit if operation.kind == OperationKind.CREATE else tasks.terminate_unit
    try:
        task.apply_async(args=[operation.pk], retry=False)
    except Exception:  # the broker being unreachable must not fail the accepted request
        logger.warning(
            "could not enqueue operation %s; the sweeper will", operation.pk, exc_info=True
        )


def claim_operation(operation_pk: int) -> Operation | None:
    """Compare-and-set an open operation to running, counting the attempt."""
    now = timezone.now()
    claimed = Operation.objects.filter(pk=operation_pk, status__in=OperationStatus.OPEN).update(
        status=OperationStatus.RUNNING, attempts=F("attempts") + 1, updated_at=now
    )
    if not claimed:
        return None
    return Operation.objects.select_related("unit", "tenant").get(pk=operation_pk)


def finish_operation(
    operation: Operation, *, error_code: str = "", error_message: str = ""
) -> None:
    status = OperationStatus.FAILED if error_code else OperationStatus.SUCCEEDED
    now = timezone.now()
    Operation.objects.filter(pk=operation.pk).update(
        status=status,
        error_code=error_code,
        error_message=error_message,
        finished_at=now,
        updated_at=now,
    )
    operation.status, operation.error_code, operation.error_message = (
        status,
        error_code,
        error_message,
    )


def note_operation_retry(operation: Operation, *, message: str) -> None:
    Operation.objects.filter(pk=operation.pk).update(
        error_message=message, updated_at=timezone.now()
    )


def stale_operations(*, older_than: datetime) -> list[Operation]:
    return list(
        Operation.objects.filter(status__in=OperationStatus.OPEN, updated_at__lt=older_than)
        .select_related("unit")
        .order_by("id")[:500]
    )
