"""Reservations in the cluster (ARCHITECTURE §22), from beat: each pass starts the reservations
whose start has come, ends those whose end has, and keeps each active one's placeholders.

A slot no live unit of the reservation takes is held by a placeholder in the tenant's
namespace: the ResourceClaim `reservation-<name>-<slot>` (what a unit of the package asks for)
and a pause pod that uses it, so the scheduler allocates its devices and no other tenant is
allocated them. A unit ordered on the reservation takes a slot; its provisioning hands the
placeholder's devices over to it (runtime/control/handover.py take_slot). At the end every
placeholder goes; the units keep running, or are stopped (`atEnd: stop`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from billing import ledger
from billing.models import Meter
from controlplane import kube
from controlplane.errors import DomainError
from controlplane.kube.errors import KubeError
from runtime import actions, lifecycle, manifests, outbox
from runtime.control import provisioning
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
            keep_placeholders(reservation)
        except KubeError as exc:
            logger.warning("placeholders of %s wait: %s", reservation, exc.message)
    charge_ended()
    return started, ended


def charge_ended() -> int:
    """Bill the unused slot time of the reservations that ended, once none of their units has
    time before the end left unwritten (an open meter started before it: the hourly seal or
    the meter's close writes it). Returns how many were billed."""
    charged = 0
    for reservation in Reservation.objects.filter(
        status=ReservationStatus.ENDED, charged_at__isnull=True
    ).select_related("package"):
        slot_of = {
            uid: slot
            for uid, slot in GPUUnit.objects.filter(
                reservation=reservation, interruptible=False
            ).values_list("uid", "reservation_slot")
            if slot is not None
        }
        unwritten = Meter.objects.filter(
            unit_uid__in=list(slot_of), started_at__lt=reservation.end
        ).exists()
        if unwritten:
            continue
        ledger.charge_reservation(
            ledger.Reserved(
                uid=reservation.uid,
                name=reservation.name,
                tenant_id=reservation.tenant_id,
                package_id=reservation.package_id,
                region=reservation.region,
                slots=reservation.count,
                devices=reservation.package.count,
                start=reservation.start,
                end=reservation.end,
            ),
            slot_of=slot_of,
        )
        Reservation.objects.filter(pk=reservation.pk).update(charged_at=timezone.now())
        charged += 1
    return charged


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


def _slots_taken(reservation: Reservation) -> set[int]:
    return {
        slot
        for slot in GPUUnit.objects.filter(
            reservation=reservation, phase__in=UnitPhase.LIVE
        ).values_list("reservation_slot", flat=True)
        if slot is not None
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
                    message=f"It holds no devices ({unit.phase}): the slot of reservation "
                    f"{reservation.name} it ran on went back to its owner.",
                )
    return len(borrowers)


def keep_placeholders(reservation: Reservation) -> int:
    """Each free slot held by its placeholder (made when missing), none for a slot a unit
    took; records how many slots hold devices. Returns the placeholders made."""
    release_lent_slots(reservation)
    taken = _slots_taken(reservation)
    selector = f"{manifests.LABEL_RESERVATION}={reservation.uid}"
    made = 0
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
            p["metadata"]["name"]
            for p in kube.list_objects(kube.POD, namespace=namespace, label_selector=selector)
        }
        for slot in range(reservation.count):
            name = reservation.placeholder_name(slot)
            if slot in taken:
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
                kube.create_or_adopt(
                    kube.POD, manifests.build_placeholder_pod(wanted), ours=_ours(wanted)
                )
    allocated = sum(
        1
        for slot in range(reservation.count)
        if slot not in taken
        and ((claims.get(reservation.placeholder_name(slot)) or {}).get("status") or {}).get(
            "allocation"
        )
    )
    held_by_units = GPUUnit.objects.filter(
        reservation=reservation, phase__in=UnitPhase.LIVE, dra__allocated=True
    ).count()
    held = allocated + held_by_units
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


def _remove(namespace: str, name: str, claims: dict, pods: set) -> None:
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
            # Never started (beat was away for its whole window): nothing held, nothing billed.
            **({} if was_held else {"charged_at": now}),
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
