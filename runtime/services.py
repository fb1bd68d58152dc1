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

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from catalog import selectors as catalog_selectors
from controlplane.kube import quantity
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


def _replay(tenant: Tenant, operation_id: str, request_hash: str) -> CreateResult | None:
    operation = (
        Operation.objects.select_related("unit")
        .filter(tenant=tenant, operation_id=operation_id)
        .first()
    )
    if operation is None:
        return None
    if operation.kind != OperationKind.CREATE or operation.fingerprint != request_hash:
        raise OperationConflict(
            f"operation {operation_id} already exists with a different request payload.",
            details={"operationID": operation_id},
        )
    return CreateResult(unit=operation.unit, created=False)


def _check_quota(
    tenant: Tenant, usage: selectors.TenantUsage, *, cpu_millicores: int, memory_bytes: int
) -> None:
    """The tenant's live units plus the new one must fit its quota; called under the tenant lock."""
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
            raise InsufficientCapacity(
                f"tenant {tenant.slug} quota would be exceeded for {limit}: "
                f"used={show(used)} requested={show(requested)} hard={show(hard)}",
                details={
                    "limit": limit,
                    "used": show(used),
                    "requested": show(requested),
                    "hard": show(hard),
                },
            )


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
    replay = _replay(tenant, operation_id, request_hash)
    if replay:
        return replay

    package = catalog_selectors.get_active_package(package_id)
    if package is None:
        raise InvalidRequest(
            f'packageID "{package_id}" is not offered.',
            details={"fields": {"packageID": ["Unknown or inactive package."]}},
        )
    try:
        with transaction.atomic():
            # Serialise orders per tenant: quota, name and operationID checks see each other.
            list(Tenant.objects.select_for_update().filter(pk=tenant.pk).values_list("pk"))
            usage = selectors.get_tenant_usage(tenant=tenant, name=name)
            if usage.name_taken:
                # An identical request that committed while we waited for the lock is a replay.
                replay = _replay(tenant, operation_id, request_hash)
                if replay:
                    return replay
                raise NameConflict(
                    f"gpu unit name {tenant.namespace}/{name} is already in use.",
                    details={"name": name},
                )
            cpu_millicores = int(quantity.parse(package.cpu) * 1000)
            memory_bytes = int(quantity.parse(package.memory))
            _check_quota(tenant, usage, cpu_millicores=cpu_millicores, memory_bytes=memory_bytes)
            unit = GPUUnit.objects.create(
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
                claim_name=manifests.claim_name_for(name),
                claim_request_name=package.claim_request_name,
                count=package.count,
                selectors=list(package.selectors),
                capacity=dict(package.capacity),
                image=image,
                template=template,
                dra={
                    "claimName": manifests.claim_name_for(name),
                    "allocated": False,
                    "devices": [],
                },
            )
            operation = Operation.objects.create(
                tenant=tenant,
                operation_id=operation_id,
                kind=OperationKind.CREATE,
                fingerprint=request_hash,
                unit=unit,
            )
            # A new unit has no timeline yet, so nothing to bump: append directly.
            UnitEvent.objects.create(
                unit=unit,
                type=EventType.NORMAL,
                reason="Accepted",
                message=f"Ordered package {package.id}.",
            )
            transaction.on_commit(lambda: enqueue(operation))
    except IntegrityError:
        # A concurrent request with the same operationID or name won the race (an operationID
        # already used for another name lands here too, on its unique constraint).
        replay = _replay(tenant, operation_id, request_hash)
        if replay:
            return replay
        raise NameConflict(
            f"gpu unit name {tenant.namespace}/{name} is already in use.", details={"name": name}
        ) from None
    return CreateResult(unit=unit, created=True)


def request_unit_deletion(*, tenant: Tenant, name: str) -> GPUUnit:
    """Mark the unit Terminating and queue its teardown. Repeating it changes nothing."""
    with transaction.atomic():
        unit = (
            GPUUnit.objects.select_for_update()
            .filter(tenant=tenant, name=name)
            .order_by("-id")
            .first()
        )
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
