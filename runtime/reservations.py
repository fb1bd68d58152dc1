"""Reservations (ARCHITECTURE §22): devices held for a tenant ahead of time. This module
records them, refuses what cannot be held, and answers what a reservation holds; beat's pass
(runtime/control/reservations.py) takes the devices with placeholders at the start and lets
them go at the end, and a unit ordered with `reservation` (runtime/orders.py) takes a slot.

A reservation is placed in one cluster when it is made: the region's cluster with the most
room for its package now. One that starts now must fit there now (409 otherwise); one that
starts later takes what is free at its start, and says how much it holds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from billing import budgets, ledger
from catalog import selectors as catalog_selectors
from catalog.models import Package
from controlplane.errors import DomainError, InvalidRequest, NotFound
from controlplane.validation import fold_case
from inventory import placement
from inventory import selectors as inventory_selectors
from inventory.models import PackageAvailability
from runtime import orders, validation
from runtime.errors import InsufficientCapacity, InvalidState, RegionUnavailable
from runtime.models import GPUUnit, Reservation, ReservationEnd, ReservationStatus
from tenancy import services as tenancy_services
from tenancy.errors import LimitExceeded
from tenancy.models import Tenant

# A start this far in the past is read as "now" (a client's clock, a slow request).
PAST_START_TOLERANCE = timedelta(minutes=5)
HOLDING = (ReservationStatus.SCHEDULED, ReservationStatus.ACTIVE)


class ReservationConflict(DomainError):
    code = "reservation_conflict"


@dataclass(frozen=True)
class Usage:
    """What a reservation holds now: its slots, those whose devices are held (by a
    placeholder or a unit), those its live units take, and those free for its next order."""

    count: int
    held: int
    in_use: int
    open: bool = True  # Scheduled or Active: it takes orders (in its window)

    @property
    def free(self) -> int:
        return max(self.count - self.in_use, 0) if self.open else 0


def create_reservation(
    *,
    tenant: Tenant,
    name: str,
    package_id: str,
    count: int,
    start: datetime,
    end: datetime,
    region: str = "",
    at_end: str = ReservationEnd.KEEP,
    now: datetime | None = None,
) -> Reservation:
    """Record the reservation, placed in a cluster; 400 naming fields, 409 for a taken name,
    a full device quota, or (starting now) no room for it."""
    now = now or timezone.now()
    name = fold_case(name.strip())
    package = Package.objects.filter(id=package_id, active=True).first()
    problems: dict[str, list[str]] = {}
    if problem := validation.reservation_name(name):
        problems["name"] = [problem]
    if package is None:
        problems["packageID"] = [catalog_selectors.unknown_package(package_id)]
    elif package.capacity:
        problems["packageID"] = ["A share of a device cannot be reserved: whole devices only."]
    if not 1 <= count <= settings.RESERVATION_MAX_COUNT:
        problems["count"] = [f"From 1 to {settings.RESERVATION_MAX_COUNT} units."]
    if start < now - PAST_START_TOLERANCE:
        problems["start"] = ["It is in the past."]
    start = max(start, now)
    if end <= start:
        problems["end"] = ["It must be after start (and after now)."]
    elif end - start > timedelta(days=settings.RESERVATION_MAX_DAYS):
        problems["end"] = [f"A reservation lasts at most {settings.RESERVATION_MAX_DAYS} days."]
    if at_end not in ReservationEnd.values:
        problems["atEnd"] = [f"One of {', '.join(ReservationEnd.values)}."]
    if problems:
        raise InvalidRequest("The reservation is invalid.", details={"fields": problems})
    assert package is not None
    placed = _place(package, region, count, starts_now=start <= now)
    try:
        with transaction.atomic():
            tenancy_services.lock_tenant(tenant.pk)
            # A reservation is spending: refused once an enforced budget is spent, as an
            # order or a start is.
            tenancy_services.check_budget(tenant)
            # Its slots count against the device and region quotas as units do (orders' own
            # checks), and a tenant holds only so many reservations at once.
            devices = count * package.count
            if refused := (
                orders.device_quota_problem(tenant, package.device_class_name, devices)
                or orders.region_quota_problem(tenant, placed.region, devices)
                or _reservations_problem(tenant)
            ):
                raise refused
            # An enforced budget refuses one whose commitment this month would pass it.
            if too_dear := budgets.commitment_problem(
                tenant, package_id=package.id, slots=count, start=start, end=end, now=now
            ):
                raise too_dear
            reservation = Reservation.objects.create(
                tenant=tenant,
                name=name,
                package=package,
                count=count,
                start=start,
                end=end,
                at_end=at_end,
                cluster=placed.cluster,
                region=placed.region,
            )
            # What it commits the tenant to, seen by budgets and forecasts from now on.
            ledger.commit(
                reservation_uid=reservation.uid,
                tenant_id=tenant.pk,
                name=name,
                package_id=package.id,
                region=placed.region,
                slots=count,
                devices=package.count,
                start=start,
                end=end,
            )
            return reservation
    except IntegrityError:
        raise ReservationConflict(
            f"a reservation named {name} exists.", details={"name": name}
        ) from None


def _reservations_problem(tenant: Tenant) -> LimitExceeded | None:
    """Why the tenant may not hold one more reservation (scheduled or active), or None."""
    hard = settings.RESERVATIONS_PER_TENANT
    held = Reservation.objects.filter(
        tenant=tenant, status__in=(ReservationStatus.SCHEDULED, ReservationStatus.ACTIVE)
    ).count()
    if held < hard:
        return None
    return LimitExceeded(
        f"tenant {tenant.slug} holds {held} of its {hard} reservations: cancel one, or let one "
        "end, to make another.",
        details={"limit": "reservations", "used": held, "requested": 1, "hard": hard},
    )


def _place(package: Package, region: str, count: int, *, starts_now: bool) -> placement.Placed:
    """The cluster with the most room for the package in the region (as units are placed);
    one that starts now must fit there whole."""
    candidates = inventory_selectors.placement_candidates(package.id)
    decision = placement.place(
        candidates,
        package=package.id,
        sold_in=package.regions,
        region=region,
        devices=package.count,
    )
    if isinstance(decision, placement.Placed):
        # (Placement reads availability only when there is a choice of clusters.)
        room = (
            PackageAvailability.objects.filter(cluster=decision.cluster, package_id=package.id)
            .values_list("placeable", flat=True)
            .first()
        ) or 0
        if not starts_now or room >= count:
            return decision
        decision = placement.Refused(
            "insufficient_capacity",
            f'No cluster of region "{decision.region}" has room for {count} unit(s) of '
            f'package "{package.id}" now ({room} fit).',
            [decision.region],
        )
    details = {"regions": decision.regions}
    if decision.code in ("unknown_region", "not_sold"):
        raise InvalidRequest(
            decision.message, details={**details, "fields": {"region": [decision.message]}}
        )
    if decision.code == "region_unavailable":
        raise RegionUnavailable(decision.message, details=details)
    raise InsufficientCapacity(decision.message, details=details)


def get_reservation(*, tenant: Tenant, name: str) -> Reservation:
    found = (
        Reservation.objects.filter(tenant=tenant, name=fold_case(name.strip()))
        .select_related("package")
        .first()
    )
    if found is None:
        raise NotFound(f"reservation {name} not found.")
    return found


def cancel_reservation(*, tenant: Tenant, name: str) -> Reservation:
    """Cancel a reservation before its start: nothing was held, nothing is billed, nothing
    stays committed. One that started holds its slots to its end (409)."""
    with transaction.atomic():
        reservation = (
            Reservation.objects.select_for_update(of=("self",))
            .select_related("package")
            .filter(tenant=tenant, name=fold_case(name.strip()))
            .first()
        )
        if reservation is None:
            raise NotFound(f"reservation {name} not found.")
        if reservation.status == ReservationStatus.CANCELLED:
            return reservation
        if reservation.status != ReservationStatus.SCHEDULED:
            raise InvalidState(
                f"reservation {reservation.name} is {reservation.status}: only one that has not "
                "started can be cancelled (one that started holds its slots, billed while they "
                "hold devices, to its end).",
                details={"status": reservation.status},
            )
        reservation.status = ReservationStatus.CANCELLED
        reservation.message = "Cancelled before its start."
        reservation.save(update_fields=["status", "message", "updated_at"])
        ledger.withdraw(reservation.uid)
    return reservation


def usage(reservations: list[Reservation]) -> dict[int, Usage]:
    """Each reservation's usage (one query for the live units on them)."""
    live = dict(
        GPUUnit.objects.live()
        .filter(reservation__in=reservations, interruptible=False)
        .values("reservation")
        .annotate(n=Count("id"))
        .values_list("reservation", "n")
    )
    return {
        r.pk: Usage(
            count=r.count,
            held=r.held if r.status == ReservationStatus.ACTIVE else 0,
            in_use=live.get(r.pk, 0),
            open=r.status in HOLDING,
        )
        for r in reservations
    }
