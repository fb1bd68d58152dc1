"""Reservations in the cluster (ARCHITECTURE §22), from beat: each pass starts the reservations
whose start has come, ends those whose end has, and keeps each active one's placeholders.

A slot no live unit of the reservation takes is held by a placeholder in the tenant's
namespace: the ResourceClaim `reservation-<name>-<slot>` (what a unit of the package asks for)
and a pause pod that uses it, so the scheduler allocates its devices and no other tenant is
allocated them. A unit ordered on the reservation takes a slot; its provisioning hands the
placeholder's devices over to it (runtime/control/handover.py take_slot). The owner's
stopped unit keeps its slot, held by a placeholder again until it starts. At the end every
placeholder goes; the units keep running, or are stopped (`atEnd: stop`).

A slot is billed while it holds devices: a unit on it by its own meter (the reservation's
used time), a placeholder by a meter of the slot's (its unused time); a slot whose
placeholder waits for devices bills nothing."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from billing import ledger
from controlplane import kube
from controlplane.errors import DomainError
from controlplane.kube.errors import KubeError
from runtime import actions, lifecycle, manifests, outbox
from runtime.control import provisioning, status
from runtime.models import (
    GPUUnit,
    OperationKind,
    Reservation,
    ReservationEnd,
    ReservationStatus,
    UnitPhase,
)

logger = logging.getLogger(__name__)


def run(*, now: datetime | None = None) -> tuple[int, int]:
    """One pass: (reservations started, reservations ended)."""
    now = now or timezone.now()
    started = (
        Reservation.objects.filter(status=ReservationStatus.SCHEDULED, start__lte=now)
        .exclude(end__lte=now)
        .update(status=ReservationStatus.ACTIVE, message="", updated_at=now)
    )
    # One that was never started before its end (beat was down): ended without holding.
    ended = 0
    for reservation in Reservation.objects.filter(
        status__in=(ReservationStatus.SCHEDULED, ReservationStatus.ACTIVE), end__lte=now
    ).select_related("tenant", "package"):
        try:
            finish(reservation, now=now)
        except KubeError as exc:
            logger.warning("reservation %s not ended yet: %s", reservation, exc.message)
            continue
        ended += 1
    for reservation in Reservation.objects.filter(status=ReservationStatus.ACTIVE).select_related(
        "tenant", "package"
    ):
        try:
            keep_placeholders(reservation, now=now)
        except KubeError as exc:
            logger.warning("placeholders of %s wait: %s", reservation, exc.message)
    return started, ended


def placeholder(reservation: Reservation, slot: int) -> manifests.Placeholder:
    package = reservation.package
    return manifests.Placeholder(
        name=reservation.placeholder_name(slot),
        namespace=reservation.tenant.namespace,
        tenant=reservation.tenant.slug,
        reservation_uid=str(reservation.uid),
        slot=slot,
        device_class_name=package.device_class_name,
        count=package.count,
        selectors=list(package.selectors),
        match_attribute=package.match_attribute,
        image=settings.RESERVATION_PLACEHOLDER_IMAGE,
    )


def _slot_units(reservation: Reservation) -> dict[int, GPUUnit]:
    """The live unit each slot is assigned to (its owner's, or one it was lent to)."""
    return {
        unit.reservation_slot: unit
        for unit in GPUUnit.objects.live()
        .filter(reservation=reservation, reservation_slot__isnull=False)
        .only("phase", "dra", "reservation_slot")
        if unit.reservation_slot is not None
    }


def release_lent_slots(reservation: Reservation) -> int:
    """A borrower (an interruptible unit on a slot nobody used) that stopped, was preempted or
    failed with nothing allocated gives its slot back at once: the slot is held by a
    placeholder again, for the owner (started again, it is placed as any interruptible unit
    is). Returns how many slots came back."""
    borrowers = list(
        GPUUnit.objects.filter(reservation=reservation, interruptible=True).filter(
            Q(phase__in=UnitPhase.AT_REST) | Q(phase=UnitPhase.FAILED, dra__allocated=False)
        )
    )
    for unit in borrowers:
        with transaction.atomic():
            if GPUUnit.objects.filter(pk=unit.pk, reservation=reservation).update(
                reservation=None, reservation_slot=None
            ):
                lifecycle.record_event(
                    unit,
                    reason="LentSlotReturned",
                    # Another tenant's reservation: its name is not the borrower's to read.
                    message=f"It holds no devices ({unit.phase}): the reserved slot it was lent "
                    "went back to its owner.",
                )
    return len(borrowers)


def keep_placeholders(reservation: Reservation, *, now: datetime | None = None) -> int:
    """Each slot no unit takes is held by its placeholder (made when missing); so is the
    slot of its owner's stopped unit, until that unit starts again and takes it back. A
    unit's provisioning hands a placeholder over (handover.take_slot): one left beside a unit
    that holds devices is surplus and goes. Each placeholder holding devices is metered (the
    reservation's unused time); the pass records how many slots hold devices. Returns the
    placeholders made."""
    now = now or timezone.now()
    release_lent_slots(reservation)
    assigned = _slot_units(reservation)
    selector = f"{manifests.LABEL_RESERVATION}={reservation.uid}"
    made = 0
    held_by: dict[int, tuple[dict, dict]] = {}  # slot -> (claim, pod) holding devices
    with kube.using(reservation.cluster):
        provisioning.ensure_tenant_namespace_once(reservation.tenant)
        namespace = reservation.tenant.namespace
        claims = {
            c["metadata"]["name"]: c
            for c in kube.list_objects(
                kube.RESOURCECLAIM, namespace=namespace, label_selector=selector
            )
        }
        pods = {
            p["metadata"]["name"]: p
            for p in kube.list_objects(kube.POD, namespace=namespace, label_selector=selector)
        }
        for slot in range(reservation.count):
            name = reservation.placeholder_name(slot)
            unit = assigned.get(slot)
            if unit is not None and unit.phase not in UnitPhase.AT_REST:
                if unit.dra.get("allocated"):
                    _remove(namespace, name, claims, pods)
                continue
            wanted = placeholder(reservation, slot)
            if name not in claims:
                claims[name] = kube.create_or_adopt(
                    kube.RESOURCECLAIM,
                    manifests.build_placeholder_claim(wanted),
                    ours=_ours(wanted),
                )
                made += 1
            if name not in pods:
                pods[name] = kube.create_or_adopt(
                    kube.POD, manifests.build_placeholder_pod(wanted), ours=_ours(wanted)
                )
            claim, pod = claims[name], pods[name]
            if ((claim.get("status") or {}).get("allocation")) and not (
                pod.get("metadata") or {}
            ).get("deletionTimestamp"):
                held_by[slot] = (claim, pod)
    _meter_slots(reservation, held_by, now=now)
    # Counted apart from `assigned`: while the owner takes a lent slot back, two units name it.
    held_by_units = (
        GPUUnit.objects.live().filter(reservation=reservation, dra__allocated=True).count()
    )
    held = len(held_by) + held_by_units
    if held != reservation.held:
        message = (
            ""
            if held >= reservation.count
            else f"{held} of {reservation.count} slot(s) hold devices: the rest wait for "
            "devices to be free in its cluster."
        )
        Reservation.objects.filter(pk=reservation.pk).update(held=held, message=message)
        reservation.held, reservation.message = held, message
    return made


def _meter_slots(
    reservation: Reservation, held_by: dict[int, tuple[dict, dict]], *, now: datetime
) -> None:
    """A meter follows each placeholder that holds devices, from when its pod was scheduled
    on them (the reservation's unused time: a slot is billed while it holds devices), and
    closes when it no longer does. One statement when nothing changed."""
    slot_uids = {
        ledger.slot_resource_uid(reservation.uid, slot): slot for slot in range(reservation.count)
    }
    meters = ledger.open_meters(list(slot_uids))
    for uid, meter in meters.items():
        if (
            slot_uids[uid] not in held_by
            or held_by[slot_uids[uid]][1]["metadata"].get("uid") != meter.pod_uid
        ):
            # To the whole second, as a unit's start on the slot is dated (never overlapping).
            ledger.close_meter(uid, at=now.replace(microsecond=0), pod_uid=meter.pod_uid)
    opening = [
        (uid, slot) for uid, slot in slot_uids.items() if slot in held_by and uid not in meters
    ]
    floors = ledger.billed_until(uid for uid, _slot in opening) if opening else {}
    for uid, slot in opening:
        claim, pod = held_by[slot]
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        scheduled = status.k8s_time(_scheduled_at(pod)) or now
        ledger.open_meter(
            ledger.Holding(
                unit_uid=uid,
                unit_name=f"{reservation.name}/{slot}",
                tenant_id=reservation.tenant_id,
                package_id=reservation.package_id,
                claim_uid=claim["metadata"].get("uid") or "",
                region=reservation.region,
                pod_uid=pod["metadata"].get("uid") or "",
                pod_created_at=status.k8s_time(pod["metadata"].get("creationTimestamp")),
                devices=[{"pool": r["pool"], "device": r["device"]} for r in results],
                count=reservation.package.count,
                reservation_uid=reservation.uid,
                reservation_end=reservation.end,
                placeholder=True,
            ),
            at=min(max(scheduled, reservation.start), now),
            floor=floors.get(uid),
        )
    ledger.mark_seen([uid for uid, slot in slot_uids.items() if slot in held_by], at=now)


def _scheduled_at(pod: dict) -> str | None:
    """When the scheduler bound the pod (its claim allocated): PodScheduled's transition."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return condition.get("lastTransitionTime")
    return None


def close_slot_meter(reservation: Reservation, slot: int, *, at: datetime) -> None:
    """The slot's placeholder is handed over or goes: its unused time ends at `at`."""
    ledger.close_meter(ledger.slot_resource_uid(reservation.uid, slot), at=at)


def _remove(namespace: str, name: str, claims: dict, pods: dict) -> None:
    if name in pods:
        kube.delete(kube.POD, namespace, name)
    if name in claims:
        kube.delete(kube.RESOURCECLAIM, namespace, name)


def finish(reservation: Reservation, *, now: datetime) -> None:
    """Its end: every placeholder goes; its units keep running on demand, or are stopped."""
    selector = f"{manifests.LABEL_RESERVATION}={reservation.uid}"
    namespace = reservation.tenant.namespace
    with kube.using(reservation.cluster):
        for kind in (kube.POD, kube.RESOURCECLAIM):
            for found in kube.list_objects(kind, namespace=namespace, label_selector=selector):
                kube.delete(kind, namespace, found["metadata"]["name"])
    for slot in range(reservation.count):  # its unused time ends with its window
        close_slot_meter(reservation, slot, at=min(now, reservation.end))
    stopping = 0
    if reservation.at_end == ReservationEnd.STOP:
        for unit in GPUUnit.objects.filter(
            reservation=reservation, phase__in=UnitPhase.LIVE - UnitPhase.AT_REST
        ).select_related("tenant"):
            try:
                actions.request_action(
                    tenant=unit.tenant,
                    name=unit.name,
                    uid=str(unit.uid),
                    kind=OperationKind.STOP,
                    operation_id=outbox.reservation_end_operation_id(unit),
                    reason="ReservationEnded",
                    message=f"Stopped at the end of reservation {reservation.name}.",
                )
                stopping += 1
            except DomainError as exc:
                logger.warning("%s not stopped at the end of %s: %s", unit, reservation, exc)
                continue  # refused now (another operation on it): it runs on, on demand
    was_held = reservation.status == ReservationStatus.ACTIVE
    with transaction.atomic():
        Reservation.objects.filter(pk=reservation.pk).update(
            status=ReservationStatus.ENDED,
            held=0,
            updated_at=now,
            message=(
                f"Ended at {reservation.end:%Y-%m-%d %H:%M:%S} UTC"
                + ("" if was_held else " (it never started: nothing was held)")
                + (f"; {stopping} unit(s) stopped." if stopping else ".")
            ),
        )
    logger.info("reservation %s ended", reservation)


def _ours(held: manifests.Placeholder) -> Callable[[dict], bool]:
    def check(found: dict) -> bool:
        labels = (found.get("metadata") or {}).get("labels") or {}
        return labels.get(manifests.LABEL_RESERVATION) == held.reservation_uid

    return check
