"""Taking interruptible units' devices back for on-demand units (ARCHITECTURE §22), from beat.

Each pass does two things:

1. **Notice.** An on-demand unit that has waited for devices (Pending, nothing allocated, the
   scheduler's reason NoMatchingDevices: not storage, CPU or quota) for
   PREEMPTION_WAIT_SECONDS gets the interruptible units that give way for it, chosen from the
   mirror by inventory.preemption (one node; fewest, then those serving nothing, then
   youngest). Waiting units are taken each tenant's oldest first. Each victim is told at
   once, in one transaction: its `preemption` (reason, noticeAt, preemptAt = now + its
   package's notice), a timeline entry and the `unit.preempting` webhook. The waiting unit's
   timeline says what it waits for.
2. **Preemption.** Called off when the waiting unit no longer waits (deleted, stopped, placed):
   the victims keep their devices and are told (`PreemptionCalledOff`,
   `unit.preemption_called_off`). Else a victim whose preemptAt has come is stopped by the
   control plane (operation
   `@preempt-...`): its pod gets its termination grace, and once it is gone the unit is
   Preempted, billed until its devices were released, restartable with start.
3. **Resume.** A Preempted unit ordered with autoResume is started again (`@resume-...`) once
   its package fits its cluster again, as the mirror says.

The control plane decides this itself: nothing relies on kube-scheduler preempting pods for
DRA devices. Before the victims are stopped their devices are handed over to the waiting unit
(runtime/control/handover.py): tainted NoSchedule for it alone, and its claim made again to
ask for exactly them, so no other claim is allocated them in between. The hand-over ends once
it holds them (or stops waiting)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from catalog.models import DEFAULT_PREEMPTION_NOTICE_SECONDS, Package
from controlplane.errors import DomainError
from controlplane.kube.errors import KubeError
from inventory import preemption
from inventory.models import PackageAvailability
from runtime import actions, lifecycle, outbox, selectors
from runtime.control import handover, reconcile
from runtime.models import EventType, GPUUnit, OperationKind, RunPolicy, UnitPhase
from tenancy import webhooks

logger = logging.getLogger(__name__)

REASON = "CapacityReclaimed"
_HOLDING = selectors.PREEMPTIBLE_PHASES
# Waiting units considered per pass, oldest first (two reads each): a burst that waits is
# served over several passes.
WAITING_PER_PASS = 50


def run(*, now: datetime | None = None) -> tuple[int, int, int]:
    """One pass: (victims told, victims stopped, preempted units resumed)."""
    now = now or timezone.now()
    told, stopped, resumed = give_notice(now=now), carry_out(now=now), resume()
    settle_handovers(now=now)
    return told, stopped, resumed


# What a unit waits for when devices are what it lacks (the scheduler's "cannot allocate all
# claims"); a unit waiting for storage, CPU or memory, or its quota, frees nobody's devices.
WAITING_FOR_DEVICES = ("NoMatchingDevices", reconcile.WAITING_FOR_PREEMPTION)


def waiting_units(now: datetime, *, served: set[str]) -> list[GPUUnit]:
    """On-demand units waiting for devices (and nothing else) long enough that the scheduler
    had its chance, except those `served` (devices are already being freed for them): each
    tenant's oldest first, then their second oldest, and so on, so one tenant's backlog does
    not keep everyone else's waiting."""
    return list(
        GPUUnit.objects.exclude(uid__in=served)
        .filter(
            # A unit ordered on its reservation waits for its slot's devices whatever the
            # scheduler says first.
            Q(reason__in=WAITING_FOR_DEVICES) | Q(reservation_slot__isnull=False),
            interruptible=False,
            phase=UnitPhase.PENDING,
            run_policy=RunPolicy.RUNNING,
            dra__allocated=False,
            updated_at__lte=now - timedelta(seconds=settings.PREEMPTION_WAIT_SECONDS),
            capacity={},  # whole devices: a share's room is not counted in devices
        )
        .annotate(
            turn=Window(RowNumber(), partition_by=F("tenant_id"), order_by=F("created_at").asc())
        )
        .order_by("turn", "created_at", "id")[:WAITING_PER_PASS]
    )


def still_waiting(uids: set[str]) -> set[str]:
    """Which of these units still wait for the devices their victims are to free: not deleted,
    stopped or placed meanwhile (a unit being handed its devices is restarted: Provisioning)."""
    return {
        str(uid)
        for uid in GPUUnit.objects.filter(
            uid__in=uids,
            interruptible=False,
            phase__in=(UnitPhase.PENDING, UnitPhase.PROVISIONING),
            run_policy=RunPolicy.RUNNING,
            dra__allocated=False,
        ).values_list("uid", flat=True)
    }


def call_off_stale(*, now: datetime) -> set[int]:
    """Call off the preemptions whose waiting unit no longer waits (deleted, stopped, placed);
    returns the pks of the victims that keep their devices."""
    told = list(
        GPUUnit.objects.filter(preemption__has_key="for", phase__in=_HOLDING).select_related(
            "tenant"
        )
    )
    waiting = still_waiting({victim.preemption["for"] for victim in told})
    stale = [victim for victim in told if victim.preemption["for"] not in waiting]
    return call_off(stale, now=now)


def call_off(victims: list[GPUUnit], *, now: datetime) -> set[int]:
    """The units these victims were to give way for no longer wait: they keep their devices.
    Each is told on its timeline and by `unit.preemption_called_off`. Returns their pks."""
    called_off: set[int] = set()
    for victim in victims:
        with transaction.atomic():
            cleared = GPUUnit.objects.filter(
                pk=victim.pk, phase__in=_HOLDING, preemption=victim.preemption
            ).update(preemption={}, updated_at=now)
            if not cleared:
                continue  # stopped or told again meanwhile
            lifecycle.record_event(
                victim,
                reason="PreemptionCalledOff",
                message="The on-demand unit it was to give way for no longer waits (deleted, "
                "stopped or placed elsewhere): it keeps its devices.",
            )
            _announce(victim, "unit.preemption_called_off", now=now)
        called_off.add(victim.pk)
    if called_off:
        logger.info("preemption called off for %s", [v.name for v in victims])
    return called_off


def give_notice(*, now: datetime) -> int:
    told = 0
    # Waiting units whose victims are still giving way (told, or being stopped).
    served = set(
        GPUUnit.objects.filter(
            preemption__has_key="for", phase__in=(*_HOLDING, UnitPhase.STOPPING)
        ).values_list("preemption__for", flat=True)
    )
    for waiting in waiting_units(now, served=served):
        choice = _choose(waiting)
        if choice is None:
            continue
        told += _tell(waiting, choice, now=now)
    return told


def _choose(waiting: GPUUnit) -> preemption.Choice | None:
    if waiting.reservation_id is not None and waiting.reservation_slot is not None:
        return _lender_of(waiting)
    return selectors.preemption_choice(
        cluster=waiting.cluster, package_id=waiting.package_id, count=waiting.count
    )


def _lender_of(waiting: GPUUnit) -> preemption.Choice | None:
    """A unit ordered on its reservation waits for a slot lent to an interruptible unit: that
    unit gives way (and only that one: the slot's devices are handed over to the waiting
    unit). None when nobody holds its slot (the scheduler is still at it)."""
    lent = (
        GPUUnit.objects.filter(
            reservation=waiting.reservation_id,
            reservation_slot=waiting.reservation_slot,
            interruptible=True,
            phase__in=_HOLDING,
        )
        .exclude(pk=waiting.pk)
        .first()
    )
    if lent is None:
        return None
    holder = preemption.Holder(
        uid=str(lent.uid),
        node=lent.node_name,
        started=lent.started_at or lent.created_at,
        devices=lent.count,
    )
    return preemption.Choice(node=lent.node_name, victims=(holder,))


def _tell(waiting: GPUUnit, choice: preemption.Choice, *, now: datetime) -> int:
    """Record the preemption on each victim, in one transaction with row locks (in pk order,
    as every writer of several units takes them); none when one of them changed meanwhile."""
    notice = dict(
        Package.objects.filter(
            id__in=GPUUnit.objects.filter(uid__in=[v.uid for v in choice.victims]).values(
                "package_id"
            )
        ).values_list("id", "preemption_notice_seconds")
    )
    with transaction.atomic():
        victims = list(
            GPUUnit.objects.select_for_update()
            .filter(
                uid__in=[v.uid for v in choice.victims],
                interruptible=True,
                phase__in=_HOLDING,
                preemption={},
            )
            .select_related("tenant")
            .order_by("pk")
        )
        if len(victims) != len(choice.victims):
            return 0  # stopped, deleted or told meanwhile: the next pass chooses again
        for victim in victims:
            seconds = notice.get(victim.package_id, DEFAULT_PREEMPTION_NOTICE_SECONDS)
            victim.preemption = {
                "reason": REASON,
                "noticeAt": _stamp(now),
                "preemptAt": _stamp(now + timedelta(seconds=seconds)),
                "for": str(waiting.uid),
            }
            GPUUnit.objects.filter(pk=victim.pk).update(
                preemption=victim.preemption, updated_at=now
            )
            message = (
                f"An on-demand unit needs this unit's devices: it is stopped at "
                f"{victim.preemption['preemptAt']} ({seconds} s notice), then its containers "
                f"get their {victim.termination_grace_seconds} s grace."
            )
            lifecycle.record_event(
                victim, reason="Preempting", message=message, type=EventType.WARNING
            )
            _announce(
                victim,
                "unit.preempting",
                now=now,
                preemption={k: v for k, v in victim.preemption.items() if k != "for"},
            )
        until = now + timedelta(
            seconds=max(
                notice.get(v.package_id, DEFAULT_PREEMPTION_NOTICE_SECONDS) for v in victims
            )
        )
        # Its reason from now on (the reconcile keeps it while it is Pending).
        lifecycle.transition_unit(
            waiting,
            to=UnitPhase.PENDING,
            reason=reconcile.WAITING_FOR_PREEMPTION,
            message=f"{len(victims)} interruptible unit(s) on node {choice.node} give way for "
            f"it: their devices are free after {until:%Y-%m-%d %H:%M:%S} UTC and their grace.",
            allowed_from={UnitPhase.PENDING},
            preemption_wait_until=until,
        )
    logger.info("preempting %s on %s for %s", [v.name for v in victims], choice.node, waiting.name)
    return len(victims)


def carry_out(*, now: datetime) -> int:
    """Stop the victims whose preemptAt has come, their devices first handed over to the unit
    they give way for (runtime/control/handover.py)."""
    stopped = 0
    due = list(
        GPUUnit.objects.filter(
            preemption__preemptAt__lte=_stamp(now),
            phase__in=(*_HOLDING, UnitPhase.FAILED),
        ).select_related("tenant")
    )
    called_off = call_off_stale(now=now)
    due = [victim for victim in due if victim.pk not in called_off]
    for waiting_uid in sorted({victim.preemption.get("for", "") for victim in due} - {""}):
        try:
            _hand_over(waiting_uid, now=now)
        except KubeError as exc:  # the victims wait for a later pass: nothing is released yet
            logger.warning("hand-over to %s waits: %s", waiting_uid, exc.message)
            due = [victim for victim in due if victim.preemption.get("for") != waiting_uid]
    for victim in due:
        if victim.reservation_id is not None:
            # A lent slot goes back to the reservation's owner: started again, the unit is
            # placed as any interruptible unit is.
            GPUUnit.objects.filter(pk=victim.pk).update(reservation=None, reservation_slot=None)
        stopped += _act(
            victim,
            OperationKind.STOP,
            outbox.preempt_operation_id(victim),
            reason="Preempting",
            message=f"Stopped by the control plane: its devices are taken back ({REASON}).",
        )
    return stopped


def _hand_over(waiting_uid: str, *, now: datetime) -> None:
    """Keep every device of the units giving way for `waiting_uid` (those told, whatever their
    notice) for it alone, and have its claim made again to ask for exactly them: once, then the
    restart is asked for until it is accepted. Nothing when it stopped waiting."""
    waiting = (
        GPUUnit.objects.filter(
            uid=waiting_uid,
            phase=UnitPhase.PENDING,
            run_policy=RunPolicy.RUNNING,
            dra__allocated=False,
        )
        .select_related("tenant")
        .first()
    )
    if waiting is None:
        return
    if not waiting.handover:
        devices = {
            (device["driver"], device["pool"], device["device"])
            for victim in GPUUnit.objects.filter(preemption__for=waiting_uid)
            for device in victim.dra.get("devices") or []
        }
        handover.begin(waiting, devices, now=now)
    if waiting.handover.get("operation"):
        return
    operation_id = outbox.handover_operation_id(waiting)
    if _act(
        waiting,
        OperationKind.RESTART,
        operation_id,
        reason="HandingOver",
        message="Its claim is made again to ask for exactly the devices handed over to it.",
    ):
        waiting.handover = {**waiting.handover, "operation": operation_id}
        GPUUnit.objects.filter(pk=waiting.pk).update(handover=waiting.handover)


def settle_handovers(*, now: datetime) -> int:
    """End the hand-overs that are over: the unit holds devices, stopped waiting (stopped,
    deleted, failed), or waited HANDOVER_TIMEOUT_SECONDS in vain (the devices go back to
    everyone). Returns how many ended."""
    ended = 0
    timeout = timedelta(seconds=settings.HANDOVER_TIMEOUT_SECONDS)
    for unit in GPUUnit.objects.exclude(handover={}).select_related("tenant"):
        if unit.dra.get("allocated"):
            why = "It holds its devices"
        elif unit.phase != UnitPhase.PENDING or unit.run_policy != RunPolicy.RUNNING:
            why = f"It is {unit.phase} now"
        elif now - datetime.fromisoformat(unit.handover["at"]) > timeout:
            why = f"It waited over {settings.HANDOVER_TIMEOUT_SECONDS} s for them"
        else:
            continue
        try:
            handover.end(unit, why=why)
        except KubeError as exc:
            logger.warning("hand-over to %s not ended yet: %s", unit, exc.message)
            continue
        ended += 1
    return ended


def resume() -> int:
    """Start the Preempted units with autoResume whose package fits their cluster again (as
    the mirror says, oldest preemption first, no more than fit); one that cannot start now
    (its tenant's quota, another operation) is tried on a later pass."""
    room = {
        (row.cluster, row.package_id): row.placeable
        for row in PackageAvailability.objects.filter(placeable__gt=0)
    }
    resumed = 0
    for unit in (
        GPUUnit.objects.filter(phase=UnitPhase.PREEMPTED, auto_resume=True)
        .select_related("tenant")
        .order_by("updated_at", "id")
    ):
        key = (unit.cluster, unit.package_id)
        if room.get(key, 0) <= 0:
            continue
        if not _act(
            unit,
            OperationKind.START,
            outbox.resume_operation_id(unit),
            message="Started again by the control plane (autoResume): its package fits its "
            "cluster again.",
        ):
            continue
        room[key] -= 1
        resumed += 1
    return resumed


def _act(unit: GPUUnit, kind: str, operation_id: str, *, reason: str = "", message: str) -> bool:
    """The control plane's own stop or start of `unit`; False when it is refused now (another
    operation, its phase, its tenant's quota or budget): a later pass tries again."""
    try:
        actions.request_action(
            tenant=unit.tenant,
            name=unit.name,
            uid=str(unit.uid),
            kind=kind,
            operation_id=operation_id,
            reason=reason,
            message=message,
        )
    except DomainError:
        return False
    return True


def _announce(victim: GPUUnit, event: str, *, now: datetime, **extra: object) -> None:
    """Tell the victim's tenant's webhooks of its preemption (`extra`: more of the data)."""
    webhooks.emit(
        victim.tenant_id,
        event,
        subject=f"units/{victim.name}",
        data={
            "name": victim.name,
            "uid": str(victim.uid),
            "packageID": victim.package_id,
            "region": victim.region,
            "cluster": victim.cluster,
            **extra,
        },
        ordering_key=f"unit:{victim.uid}",
        time=now,
    )


def _stamp(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z, as the API writes times (these compare as text)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
