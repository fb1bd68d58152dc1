"""A unit's life on the database side: phase transitions and their timeline, deletion requests,
termination with the quota given back, and what provisioning and reconciling learn about it.

Phases move only by compare-and-set (`transition_unit`): a writer that read a stale phase
loses, and nothing is recorded for it. Cluster work lives in provisioning.py and reconcile.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controlplane import metrics
from runtime import manifests, outbox, selectors, validation
from runtime.models import (
    EventType,
    GPUUnit,
    Operation,
    OperationKind,
    UnitEvent,
    UnitPhase,
)
from tenancy import services as tenancy_services
from tenancy import webhooks
from tenancy.models import Tenant
from tenancy.selectors import NO_USAGE, usage_of

logger = logging.getLogger(__name__)


# A stage a pod passes before it runs. The observer may bill a pod (UsageStarted) before the
# reconcile records its claim allocated: when the pod ran before the worker had recorded the
# unit (Provisioned), the reconcile leaves the unit to the worker until then. The entry of such
# a stage goes before the usage recorded early, so the timeline reads as things happened.
BEFORE_USAGE = frozenset({"Allocated"})
# How far back the usage recorded early can be: Provisioned and the phase it changed.
LOOK_BACK = 4


def record_event(
    unit: GPUUnit, *, reason: str, message: str = "", type: str = EventType.NORMAL
) -> UnitEvent:
    """Append to the unit's timeline; the same reason and message as the latest entry bumps it."""
    recent = list(UnitEvent.objects.filter(unit=unit).order_by("-id")[:LOOK_BACK])
    latest = recent[0] if recent else None
    now = timezone.now()
    if latest and latest.reason == reason and latest.message == message and latest.type == type:
        UnitEvent.objects.filter(pk=latest.pk).update(count=F("count") + 1, last_seen=now)
        latest.count += 1
        latest.last_seen = now
        return latest
    early = _usage_recorded_early(recent) if reason in BEFORE_USAGE else []
    if not early:
        return append_event(unit, reason=reason, message=message, type=type)
    with transaction.atomic():
        UnitEvent.objects.filter(pk__in=[entry.pk for entry in early]).delete()
        entry = append_event(unit, reason=reason, message=message, type=type)
        for moved in early:
            again = append_event(
                unit,
                reason=moved.reason,
                message=moved.message,
                type=moved.type,
                observed_at=moved.observed_at,
            )
            UnitEvent.objects.filter(pk=again.pk).update(
                count=moved.count, first_seen=moved.first_seen, last_seen=moved.last_seen
            )
    return entry


def _usage_recorded_early(recent: list[UnitEvent]) -> list[UnitEvent]:
    """The UsageStarted entries among `recent` (newest first) of the pod billed now: those
    after the latest UsageEnded, oldest first."""
    early = []
    for entry in recent:
        if entry.reason == "UsageEnded":
            break
        if entry.reason == "UsageStarted":
            early.append(entry)
    return early[::-1]


def append_event(
    unit: GPUUnit,
    *,
    reason: str,
    message: str = "",
    type: str = EventType.NORMAL,
    observed_at: datetime | None = None,
) -> UnitEvent:
    """Append to the unit's timeline without looking at its latest entry: for an entry that
    cannot repeat it (a phase the unit was not in, a create's one Provisioned), one statement
    instead of record_event's two."""
    return UnitEvent.objects.create(
        unit=unit, type=type, reason=reason, message=message, observed_at=observed_at
    )


def transition_unit(
    unit: GPUUnit,
    *,
    to: str,
    reason: str = "",
    message: str = "",
    allowed_from: Iterable[str] | None = None,
    event_type: str = EventType.NORMAL,
    **fields: Any,
) -> bool:
    """Move a unit to phase `to` only if it is still in the phase we read (or one of
    `allowed_from`); record the change on its timeline. Returns False if someone else won."""
    sources = set(allowed_from) if allowed_from is not None else {unit.phase}
    now = timezone.now()
    # (Usage follows the pod, not the phase: settle_meters.)
    updated = GPUUnit.objects.filter(pk=unit.pk, phase__in=sources).update(
        phase=to, reason=reason, message=message, updated_at=now, **fields
    )
    if not updated:
        return False
    if to == UnitPhase.RUNNING and unit.phase != UnitPhase.RUNNING and unit.created_at:
        metrics.UNIT_TIME_TO_RUNNING.observe((now - unit.created_at).total_seconds())
    changed = unit.phase != to or unit.reason != reason
    previous = unit.phase
    unit.phase, unit.reason, unit.message, unit.updated_at = to, reason, message, now
    for name, value in fields.items():
        setattr(unit, name, value)
    if to not in sources:
        # The unit left a phase for another: its latest entry is of an earlier phase.
        append_event(unit, reason=reason or to, message=message, type=event_type)
        announce_phase(unit, previous=previous, time=now)
    elif changed:
        record_event(unit, reason=reason or to, message=message, type=event_type)
    return True


# Phase changes whose reason is an event of its own for the unit's webhooks.
_EVENT_FOR_REASON = {
    "AutoStop": "unit.auto_stopped",
    "DeviceUnhealthy": "unit.device_unhealthy",
}


def announce_phase(unit: GPUUnit, *, previous: str, time: datetime) -> None:
    """Tell the tenant's webhooks the unit moved from `previous` to its phase (and, for an
    auto-stop or an unhealthy device, that too), in order per unit."""
    data = {
        "name": unit.name,
        "uid": str(unit.uid),
        "phase": unit.phase,
        "previousPhase": previous,
        "reason": unit.reason,
        "message": unit.message,
        "packageID": unit.package_id,
        "region": unit.region,
        "cluster": unit.cluster,
    }
    subject, key = f"units/{unit.name}", f"unit:{unit.uid}"
    webhooks.emit(
        unit.tenant_id,
        "unit.phase_changed",
        subject=subject,
        data=data,
        ordering_key=key,
        time=time,
    )
    if event := _EVENT_FOR_REASON.get(unit.reason):
        webhooks.emit(
            unit.tenant_id, event, subject=subject, data=data, ordering_key=key, time=time
        )


def record_claim(unit: GPUUnit, *, claim_k8s_uid: str) -> None:
    """The unit's ResourceClaim was made again (for a hand-over, or without one once it is
    over): its new UID, and its timeline says why."""
    GPUUnit.objects.filter(pk=unit.pk).update(claim_k8s_uid=claim_k8s_uid)
    unit.claim_k8s_uid = claim_k8s_uid
    if unit.handover:
        message = (
            f"ResourceClaim {unit.claim_name} made again to ask for the "
            f"{len(unit.handover.get('devices') or [])} device(s) being handed over to it: "
            "they are kept for it alone until it holds them."
        )
    else:
        message = f"ResourceClaim {unit.claim_name} made again without a hand-over."
    append_event(unit, reason="ClaimRenewed", message=message)


def record_provisioned(
    unit: GPUUnit,
    operation: Operation,
    *,
    unit_k8s_uid: str,
    claim_k8s_uid: str,
    pod_k8s_uid: str,
    exposed: dict | None = None,
) -> bool:
    """The unit's GPUUnit, ResourceClaim and Pod exist: remember their UIDs and close the
    create operation as succeeded, under the unit's row lock. False, with nothing recorded,
    when the unit's deletion was requested first (which already cancelled the operation):
    a create ends `succeeded` before a deletion or `cancelled` after it, never both."""
    recorded = {
        "unit_k8s_uid": unit_k8s_uid,
        "claim_k8s_uid": claim_k8s_uid,
        "pod_k8s_uid": pod_k8s_uid,
        "exposed": exposed or {},
        "observed_generation": unit.generation,
    }
    provisioning = GPUUnit.objects.filter(
        pk=unit.pk, phase__in=(UnitPhase.ACCEPTED, UnitPhase.PROVISIONING)
    )
    with transaction.atomic():
        # Compare-and-set: the update takes the row lock and re-reads the phase behind a
        # deletion committed meanwhile, as a SELECT FOR UPDATE first would; and the
        # generation, which the control plane may have moved on meanwhile (an SSH key
        # removed): then the newer one is rolled out after this create.
        updated = provisioning.filter(generation=unit.generation).update(**recorded)
        moved_on = not updated and provisioning.update(**recorded)
        if not (updated or moved_on):
            return False
        unit.exposed = exposed or {}
        unit.observed_generation = unit.generation
        unit.unit_k8s_uid, unit.claim_k8s_uid, unit.pod_k8s_uid = (
            unit_k8s_uid,
            claim_k8s_uid,
            pod_k8s_uid,
        )
        # Once per unit: only the holder of its create operation gets here, and closes it.
        append_event(
            unit,
            reason="Provisioned",
            message=f"Created GPUUnit {unit.name}, ResourceClaim {unit.claim_name} and Pod "
            f"{manifests.pod_name_for(unit.name)}.",
        )
        outbox.finish_operation(operation)
        if moved_on:
            outbox.roll_out_change(unit, generation=_generation_now(unit))
    return True


def record_pod_recreated(unit: GPUUnit, *, pod_k8s_uid: str) -> None:
    """The unit's pod had gone and a new one was created in its place."""
    GPUUnit.objects.filter(pk=unit.pk).update(pod_k8s_uid=pod_k8s_uid)
    unit.pod_k8s_uid = pod_k8s_uid
    record_event(
        unit,
        reason="PodRecreated",
        message=f"Pod {manifests.pod_name_for(unit.name)} was missing and has been recreated.",
        type=EventType.WARNING,
    )


def mark_units_synced(unit_pks: Iterable[int]) -> None:
    """Stamp the units a reconcile pass compared with the cluster."""
    GPUUnit.objects.filter(pk__in=list(unit_pks)).update(last_sync_at=timezone.now())


def request_unit_deletion(*, tenant: Tenant, name: str, uid: str | None = None) -> GPUUnit:
    """Mark the unit Terminating and queue its teardown. Repeating it changes nothing. With
    `uid`, only that unit: a page that shows one unit never deletes a newer one of its name."""
    with transaction.atomic():
        unit = selectors.lock_unit(tenant=tenant, name=name, uid=uid)
        if unit.phase in UnitPhase.ENDING:
            return unit
        # An order (or a stop, start, restart, update) not yet carried out ends here, whatever
        # its worker is doing: the worker finishes under this row's lock and finds the unit
        # Terminating (provisioning.py).
        outbox.cancel_open_operations(unit)
        operation = Operation.objects.create(
            tenant=tenant,
            operation_id=outbox.delete_operation_id(unit),
            kind=OperationKind.DELETE,
            request_hash=outbox.request_hash({"delete": str(unit.uid)}),
            unit=unit,
        )
        transition_unit(
            unit,
            to=UnitPhase.TERMINATING,
            reason="DeletionRequested",
            message="Deletion requested.",
        )
        transaction.on_commit(lambda: outbox.enqueue(operation))
    return unit


def mark_unit_terminated(unit: GPUUnit) -> bool:
    """Move a Terminating unit whose objects are gone to Terminated, its devices released, and
    give its share of the quota back, in one transaction. The tenant row is locked first, as
    orders do, so an order waiting on this unit's name never holds the lock this needs.
    False when the unit was not Terminating (someone else finished it)."""
    with transaction.atomic():
        tenancy_services.lock_tenant(unit.tenant_id)
        charged, _generation = _charged_now(unit)
        terminated = transition_unit(
            unit,
            to=UnitPhase.TERMINATED,
            reason="Terminated",
            message="The unit's objects are gone and its devices released.",
            allowed_from={UnitPhase.TERMINATING},
            terminated_at=timezone.now(),
            dra={**(unit.dra or {}), "allocated": False, "devices": []},
        )
        if terminated:
            # Whoever saw the objects gone (the delete task, or the observer first), the
            # deletion ends with the unit: Terminated never shows beside an open deletion.
            outbox.finish_open_delete(unit)
            GPUUnit.objects.filter(pk=unit.pk).update(compute_charged=False)
            unit.compute_charged = False
            tenancy_services.refund(
                tenant_pk=unit.tenant_id,
                cpu_millicores=unit.cpu_millicores * charged,
                memory_bytes=unit.memory_bytes * charged,
                claims=1,
            )
    return terminated


def _charged_now(unit: GPUUnit) -> tuple[bool, int]:
    """The unit's compute_charged and generation as stored (read under its tenant's lock,
    which every writer of the former holds)."""
    charged, generation = GPUUnit.objects.filter(pk=unit.pk).values_list(
        "compute_charged", "generation"
    ).first() or (False, unit.generation)
    return bool(charged), generation


def _generation_now(unit: GPUUnit) -> int:
    return GPUUnit.objects.filter(pk=unit.pk).values_list("generation", flat=True).get()


START_DEADLINE_EXCEEDED = "StartDeadlineExceeded"


def _stopped_as(operation: Operation) -> tuple[str, str, str]:
    """The phase, reason and message of a unit its stop `operation` brought to rest."""
    if operation.operation_id.startswith(validation.PREEMPT_OPERATION_PREFIX):
        return (
            UnitPhase.PREEMPTED,
            "Preempted",
            "Its devices were taken back for an on-demand unit: the pod is gone; the name, "
            "storage, SSH and access settings stay. Start the unit to run it again when there "
            "is room.",
        )
    if operation.operation_id.startswith(validation.START_DEADLINE_OPERATION_PREFIX):
        return (
            UnitPhase.STOPPED,
            START_DEADLINE_EXCEEDED,
            "Its pod held its devices without starting a container until the start deadline "
            "(the timeline says what the cluster reported); nothing was billed and the devices "
            "are back in the pool. Fix the cause (the image, a secret) and start the unit again.",
        )
    return (
        UnitPhase.STOPPED,
        "Stopped",
        "The pod is gone and the claim's devices are back in the pool; the name, storage, SSH "
        "and access settings stay. Start the unit to run it again.",
    )


def mark_unit_stopped(unit: GPUUnit, operation: Operation) -> bool:
    """A Stopping unit's pod is gone: it is Stopped, its devices back in the pool, its CPU and
    memory given back to the tenant, its stop operation succeeded, in one transaction (the
    tenant lock first, as orders take it). False when the unit was no longer Stopping (its
    deletion was requested meanwhile)."""
    phase, reason, message = _stopped_as(operation)
    with transaction.atomic():
        tenancy_services.lock_tenant(unit.tenant_id)
        charged, generation = _charged_now(unit)
        stopped = transition_unit(
            unit,
            to=phase,
            reason=reason,
            message=message,
            allowed_from={UnitPhase.STOPPING},
            idle_hold_since=None,
            compute_charged=False,
            observed_generation=unit.generation,
            dra={**(unit.dra or {}), "allocated": False, "devices": []},
            node_name="",
            pod_k8s_uid="",
        )
        if stopped:
            if charged:
                tenancy_services.refund(
                    tenant_pk=unit.tenant_id,
                    cpu_millicores=unit.cpu_millicores,
                    memory_bytes=unit.memory_bytes,
                )
            outbox.finish_operation(operation)
            if generation > unit.generation:  # the control plane changed it meanwhile
                outbox.roll_out_change(unit, generation=generation)
    return stopped


_ROLLED_OUT: dict[str, str] = {
    OperationKind.START: "Started",
    OperationKind.RESTART: "Restarted",
    OperationKind.UPDATE: "Updated",
}


def record_rolled_out(
    unit: GPUUnit, operation: Operation, *, pod_k8s_uid: str, exposed: dict | None
) -> bool:
    """The unit's objects now say what its spec says (a start, restart or update carried
    out): its new pod's UID, the generation the cluster caught up with, the operation
    succeeded, under the unit's row lock. False, with nothing recorded, when its deletion was
    requested first (which cancelled the operation)."""
    with transaction.atomic():
        current = (
            GPUUnit.objects.select_for_update()
            .filter(pk=unit.pk)
            .values_list("phase", "generation")
            .first()
        )
        if current is None or current[0] in UnitPhase.ENDING:
            return False
        # The generation this operation carried out: one the control plane made meanwhile
        # (an SSH key removed) is rolled out by the follow-up below.
        fields: dict[str, Any] = {"observed_generation": unit.generation}
        if exposed is not None:
            fields["exposed"] = exposed
        if pod_k8s_uid:
            fields["pod_k8s_uid"] = pod_k8s_uid
        GPUUnit.objects.filter(pk=unit.pk).update(**fields)
        for name, value in fields.items():
            setattr(unit, name, value)
        what = _ROLLED_OUT[operation.kind]
        pod = manifests.pod_name_for(unit.name)
        record_event(
            unit,
            reason=what,
            message=f"Generation {unit.generation} rolled out"
            + (f": pod {pod} created, devices allocated afresh." if pod_k8s_uid else "."),
        )
        outbox.finish_operation(operation)
        if current[1] > unit.generation:  # the control plane changed it meanwhile
            outbox.roll_out_change(unit, generation=current[1])
    return True


def recount_usage() -> list[str]:
    """Set the usage counters of tenants whose counters disagree with their live units (a
    bug, or units written outside the order path) to what the units hold; returns their slugs.
    Counters are compared without locks, so an order committing in between only costs a
    recount under the tenant lock, which finds nothing to fix."""
    counted = selectors.count_tenant_usage()
    suspects = [
        tenant.pk
        for tenant in selectors.list_tenant_counters()
        if usage_of(tenant) != counted.get(tenant.pk, NO_USAGE)
    ]
    fixed = []
    for pk in suspects:
        with transaction.atomic():
            tenancy_services.lock_tenant(pk)
            tenant = Tenant.objects.get(pk=pk)
            # A statement after the lock: it sees every order committed before it.
            usage = selectors.count_tenant_usage(tenant=tenant).get(pk, NO_USAGE)
            charged = usage_of(tenant)
            if usage == charged:
                continue
            tenancy_services.set_usage(tenant_pk=pk, usage=usage)
            logger.warning("tenant %s usage recounted: %s -> %s", tenant.slug, charged, usage)
            fixed.append(tenant.slug)
    return fixed


def ssh_key_removed(tenant: Tenant, name: str) -> None:
    """A tenant removed an SSH key (in the same transaction, registered into tenancy.services
    from runtime.apps): each unit that named it stops naming it, a new generation of its spec
    that an update operation of the control plane's own rolls out through the outbox (its
    authorized keys rewritten, its pod kept). A unit with an operation open already gets it
    from that operation once it finishes (it rolls out the newer generation too)."""
    for unit in selectors.units_using_ssh_key(tenant=tenant, name=name):
        with transaction.atomic():
            locked = (
                GPUUnit.objects.select_for_update()
                .filter(pk=unit.pk)
                .exclude(phase__in=UnitPhase.ENDING)
                .first()
            )
            if locked is None:
                continue
            keys = [key for key in locked.ssh.get("keys") or [] if key != name]
            locked.generation += 1
            GPUUnit.objects.filter(pk=locked.pk).update(
                ssh={**locked.ssh, "keys": keys}, generation=locked.generation
            )
            record_event(
                locked,
                reason="SSHKeyRemoved",
                message=f"SSH key {name} no longer opens it (generation {locked.generation}).",
            )
            if outbox.open_operation(locked) is None:
                outbox.roll_out_change(locked, generation=locked.generation)


# A unit's reason while its cluster cannot be reached (ARCHITECTURE §20): its phase is the last
# one observed, and the reconcile replaces the reason with what the cluster says once it answers.
CLUSTER_UNREACHABLE = "ClusterUnreachable"
# The phases a reconcile derives from the cluster again when it returns.
_OBSERVED_PHASES = (UnitPhase.PROVISIONING, UnitPhase.PENDING, UnitPhase.RUNNING)


def mark_cluster_unreachable(cluster: str, *, since: datetime | None) -> int:
    """Say on each of `cluster`'s observed units, once, that its cluster cannot be reached (a
    warning on its timeline; its phase kept). Returns how many it marked."""
    since_text = f" since {since:%Y-%m-%d %H:%M:%S} UTC" if since else ""
    message = (
        f"Cluster {cluster} has not answered{since_text}: the unit shows its last observed "
        "phase, and is brought up to date when the cluster answers again."
    )
    marked = 0
    units = GPUUnit.objects.filter(cluster=cluster, phase__in=_OBSERVED_PHASES).exclude(
        reason=CLUSTER_UNREACHABLE
    )
    for unit in units:
        marked += transition_unit(
            unit,
            to=unit.phase,
            reason=CLUSTER_UNREACHABLE,
            message=message,
            event_type=EventType.WARNING,
        )
    return marked
