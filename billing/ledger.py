"""Writing the usage ledger. A unit is billed for the devices its pod holds, from the moment
the cluster says the pod started on them to the moment it says they were released (the pod
terminal or gone: runtime/control/status.py `held_since`), not for the requests that caused
either: the runtime's reconcile (runtime/control/metering.py `settle_meters`) opens and
closes meters from what it observed.

One clock: every boundary is a time the cluster reported or, where it reports none (the last
time a pod was seen running, the hour sealed), PostgreSQL's `now()` in the writing
transaction; no process clock is read here. A meter opens no earlier than the end of its
unit's last record, and the database refuses two overlapping records of a unit
(`usage_no_overlap`), so duplicated, late or reordered observations never bill time twice.

Each call costs a constant number of statements, whatever the size of the fleet.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.db.models.functions import Now, Trunc

from billing import periods, prices, rollups
from billing.models import (
    Commitment,
    Meter,
    MeteredPod,
    QuantityUnit,
    ReservationUse,
    UsageRecord,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holding:
    """What a unit's pod holds while it runs, as the runtime observed it."""

    unit_uid: uuid.UUID
    unit_name: str
    tenant_id: int
    package_id: str
    claim_uid: str
    # The region of the cluster the unit was placed in (GPUUnit.region).
    region: str
    pod_uid: str = ""
    pod_created_at: datetime | None = None
    alternative: str = ""
    # An interruptible unit: billed at its package's interruptible price, whatever it got.
    interruptible: bool = False
    # [{pool, device, shareID?, consumedCapacity?}]
    devices: list[dict] = field(default_factory=list)
    count: int = 1
    # A unit on a reservation: its reservation, and the end of the reservation's window.
    reservation_uid: uuid.UUID | None = None
    reservation_end: datetime | None = None
    # A reservation's free slot held by its placeholder: billed as the reservation's unused
    # time (unit_uid is the slot's, slot_resource_uid).
    placeholder: bool = False

    @property
    def shared(self) -> bool:
        return any(device.get("shareID") for device in self.devices)


def _meter(holding: Holding, at: datetime) -> Meter:
    return Meter(
        unit_uid=holding.unit_uid,
        unit_name=holding.unit_name,
        tenant_id=holding.tenant_id,
        region=holding.region,
        package_id=holding.package_id,
        alternative=prices.price_key(holding.alternative, interruptible=holding.interruptible),
        claim_uid=holding.claim_uid,
        pod_uid=holding.pod_uid,
        pod_created_at=holding.pod_created_at,
        devices=[
            {k: d[k] for k in ("pool", "device", "shareID", "consumedCapacity") if k in d}
            for d in holding.devices
        ],
        quantity_unit=QuantityUnit.SHARE_SECONDS if holding.shared else QuantityUnit.DEVICE_SECONDS,
        count=len(holding.devices) or holding.count,
        opened_at=at,
        started_at=at,
        seen_at=at,
        reservation_uid=holding.reservation_uid,
        reservation_end=holding.reservation_end,
        placeholder=holding.placeholder,
    )


def billed_until(unit_uids: Iterable[uuid.UUID]) -> dict[uuid.UUID, datetime]:
    """The end of each unit's last record (corrections aside): where its next meter may
    start at the earliest. One statement."""
    return dict(
        UsageRecord.objects.filter(unit_uid__in=list(unit_uids), corrects__isnull=True)
        .values("unit_uid")
        .annotate(last=Max("end"))
        .values_list("unit_uid", "last")
    )


def open_meter(holding: Holding, *, at: datetime, floor: datetime | None = None) -> bool:
    """Start metering the unit's pod from `at` (when the cluster says it started on its
    devices), no earlier than `floor` (the end of the unit's last record, billed_until), and
    remember the pod (MeteredPod). False, and nothing done, when the pod was metered before or
    a meter is open already (the caller closes a previous pod's first): two processes that see
    the same start open one meter, and the one that did says so on the timeline. Four
    statements (two inserts in a savepoint)."""
    start = max(at, floor) if floor is not None else at
    try:
        with transaction.atomic():
            MeteredPod.objects.create(
                unit_uid=holding.unit_uid,
                pod_uid=holding.pod_uid,
                created_at=holding.pod_created_at or start,
            )
            _meter(holding, start).save(force_insert=True)
    except IntegrityError:
        return False
    return True


@dataclass(frozen=True)
class PodsMetered:
    """The pods a unit's meters followed: their uids and the newest one's creation."""

    uids: frozenset[str]
    newest: datetime | None

    def is_stale(self, pod_uid: str, created_at: datetime | None) -> bool:
        """Whether an observation of this pod can bill nothing: it was metered already, or a
        pod created after it was."""
        if pod_uid in self.uids:
            return True
        return created_at is not None and self.newest is not None and created_at < self.newest


def pods_metered(unit_uids: Iterable[uuid.UUID]) -> dict[uuid.UUID, PodsMetered]:
    """The pods each of these units' meters followed (one statement)."""
    found: dict[uuid.UUID, tuple[set[str], datetime | None]] = {}
    for unit_uid, pod_uid, created_at in MeteredPod.objects.filter(
        unit_uid__in=list(unit_uids)
    ).values_list("unit_uid", "pod_uid", "created_at"):
        uids, newest = found.setdefault(unit_uid, (set(), None))
        uids.add(pod_uid)
        found[unit_uid] = (uids, created_at if newest is None else max(newest, created_at))
    return {uid: PodsMetered(frozenset(uids), newest) for uid, (uids, newest) in found.items()}


def _records(meter: Meter, end: datetime, versions: prices.Versions) -> list[UsageRecord]:
    from_versions = prices.versions_of(versions, meter.package_id, meter.alternative)
    return [
        UsageRecord(
            id=periods.record_id(meter.unit_uid, meter.claim_uid, piece.start),
            tenant_id=meter.tenant_id,
            unit_uid=meter.unit_uid,
            unit_name=meter.unit_name,
            region=meter.region,
            package_id=meter.package_id,
            alternative=meter.alternative,
            claim_uid=meter.claim_uid,
            devices=meter.devices,
            quantity_unit=meter.quantity_unit,
            **_priced(piece),
            **_reservation_use(meter, piece.start),
        )
        for piece in periods.priced_pieces(
            meter.started_at,
            end,
            count=meter.count,
            versions=from_versions,
            also=[meter.reservation_end] if meter.reservation_end else [],
        )
    ]


def _priced(piece: periods.Piece) -> dict:
    """A ledger row's fields from one priced piece of time."""
    version = piece.version
    return {
        "start": piece.start,
        "end": piece.end,
        "seconds": piece.seconds,
        "quantity": piece.quantity,
        "price_version": version,
        "hourly": piece.hourly,
        # The versions priced here are PriceVersions (periods knows only their price).
        "currency": version.currency  # type: ignore[attr-defined]
        if version is not None
        else settings.BILLING_CURRENCY,
        "cost": piece.cost,
    }


def _reservation_use(meter: Meter, start: datetime) -> dict:
    """A record of a unit on a reservation, before the reservation's end (records are cut
    there): the reservation's used time; one of a placeholder's: its unused time."""
    if meter.reservation_uid is None or meter.reservation_end is None:
        return {}
    if start >= meter.reservation_end:
        return {}
    status = ReservationUse.UNUSED if meter.placeholder else ReservationUse.USED
    return {"reservation_uid": meter.reservation_uid, "reservation_status": status}


def _write(records: list[UsageRecord]) -> None:
    """Insert these rows, those already there left as they are (a row's id is its unit,
    claim and start: written twice, it is the same row), and count the new ones into the
    rollups. The caller holds the meter's lock, so nobody else writes these ids meanwhile.
    Up to eight statements."""
    if not records:
        return
    there = set(
        UsageRecord.objects.filter(id__in=[r.id for r in records]).values_list("id", flat=True)
    )
    new = [record for record in records if record.id not in there]
    UsageRecord.objects.bulk_create(new, ignore_conflicts=True)
    rollups.add(new)


@dataclass(frozen=True)
class Closed:
    """A meter closed: billed up to `end` (never before its start), written as `records`."""

    meter: Meter
    end: datetime
    records: list[UsageRecord]


def close_meter(
    unit_uid: uuid.UUID, *, at: datetime | None, pod_uid: str | None = None
) -> Closed | None:
    """Stop metering the unit (only if its meter is of pod `pod_uid`, when given): its time
    since the last seal up to `at` written as records, the meter gone. `at` None: the last
    time its pod was seen running. An end before the meter's start (a late duplicate) bills
    nothing more. None when no such meter is open. Four statements."""
    with transaction.atomic():
        meters = Meter.objects.select_for_update().filter(unit_uid=unit_uid)
        if pod_uid is not None:
            meters = meters.filter(pod_uid=pod_uid)
        meter = meters.first()
        if meter is None:
            return None
        end = meter.seen_at if at is None else at
        if end < meter.started_at:
            logger.info(
                "meter of %s closed at %s, before its start %s: nothing more billed",
                meter.unit_name,
                end.isoformat(),
                meter.started_at.isoformat(),
            )
            end = meter.started_at
        records = _records(meter, end, prices.versions_for([meter.package_id]))
        _write(records)
        Meter.objects.filter(pk=meter.pk).delete()
        MeteredPod.objects.filter(unit_uid=unit_uid, pod_uid=meter.pod_uid).update(ended_at=end)
    return Closed(meter=meter, end=end, records=records)


def meters_of_pods(pod_uids: Iterable[str]) -> dict[uuid.UUID, str]:
    """The units whose open meters follow these pods (by uid), as {unit uid: pod uid}. One
    statement."""
    return dict(Meter.objects.filter(pod_uid__in=list(pod_uids)).values_list("unit_uid", "pod_uid"))


def seal_meters(*, now: datetime | None = None) -> int:
    """Write the whole UTC hours open meters have run through, so usage reaches the ledger
    (and exports) within the hour even for units that run for weeks; returns the records
    written. Only hours a reconcile has seen the pod running through are sealed (up to the
    hour of its `seen_at`), so a meter whose end is not known yet never seals time the pod
    did not run. "Now" is PostgreSQL's (`now` only for tests in simulated time). Meters
    being closed meanwhile are skipped (their close writes the same rows). A constant
    number of statements, whatever the number of meters."""
    this_hour = periods.floor_hour(now) if now else Trunc(Now(), "hour", tzinfo=UTC)
    with transaction.atomic():
        meters = list(
            Meter.objects.select_for_update(skip_locked=True)
            .filter(started_at__lt=this_hour)
            .annotate(db_now=Now())
        )
        sealed: dict[datetime, list[int]] = {}
        records = []
        versions = prices.versions_for(m.package_id for m in meters) if meters else {}
        for meter in meters:
            until = periods.floor_hour(min(meter.seen_at, now or meter.db_now))
            if until <= meter.started_at:
                continue
            records += _records(meter, until, versions)
            sealed.setdefault(until, []).append(meter.pk)
        if not sealed:
            return 0
        _write(records)
        for until, pks in sealed.items():
            Meter.objects.filter(pk__in=pks).update(started_at=until)
    return len(records)


def open_meters(among: Iterable[uuid.UUID] | None = None) -> dict[uuid.UUID, Meter]:
    """The open meters by unit uid; with `among`, only those of these units (a queryset of
    uids stays one statement: a subquery)."""
    meters = Meter.objects.all() if among is None else Meter.objects.filter(unit_uid__in=among)
    return {meter.unit_uid: meter for meter in meters}


def mark_seen(unit_uids: Iterable[uuid.UUID], *, at: datetime | None = None) -> None:
    """A reconcile saw these units' metered pods running, now (PostgreSQL's clock; `at` only
    for tests in simulated time). One statement."""
    uids = list(unit_uids)
    if uids:
        Meter.objects.filter(unit_uid__in=uids).update(seen_at=at or Now(), missing_since=None)


def mark_missing(unit_uids: Iterable[uuid.UUID]) -> None:
    """The backstop found these units' metered pods gone with no last state to date their end
    by: the next time it does, they are closed (one statement)."""
    uids = list(unit_uids)
    if uids:
        Meter.objects.filter(unit_uid__in=uids, missing_since__isnull=True).update(
            missing_since=Now()
        )


def correction_for(record: UsageRecord, *, note: str) -> UsageRecord:
    """The correction of `record`, unsaved: a row like it with seconds, quantity and cost
    negated, pointing at it (FOCUS ChargeClass=Correction), its id derived from the record's
    so a record is corrected at most once."""
    return UsageRecord(
        id=uuid.uuid5(periods.RECORD_NAMESPACE, f"correction/{record.id}"),
        tenant_id=record.tenant_id,
        unit_uid=record.unit_uid,
        unit_name=record.unit_name,
        region=record.region,
        package_id=record.package_id,
        alternative=record.alternative,
        claim_uid=record.claim_uid,
        devices=record.devices,
        start=record.start,
        end=record.end,
        seconds=-record.seconds,
        quantity=-record.quantity,
        quantity_unit=record.quantity_unit,
        price_version_id=record.price_version_id,
        hourly=record.hourly,
        currency=record.currency,
        cost=-record.cost,
        corrects_id=record.id,
        note=note[:200],
    )


def reverse(record: UsageRecord, *, note: str) -> UsageRecord:
    """Write the correction of `record` (the record itself stays as it was)."""
    correction = correction_for(record, note=note)
    with transaction.atomic():
        correction.save(force_insert=True)
        rollups.add([correction])
    return correction


def slot_resource_uid(reservation_uid: uuid.UUID, slot: int) -> uuid.UUID:
    """The ledger's resource id of one slot of a reservation (FOCUS ResourceId)."""
    return uuid.uuid5(reservation_uid, f"slot-{slot}")


def commit(
    *,
    reservation_uid: uuid.UUID,
    tenant_id: int,
    name: str,
    package_id: str,
    region: str,
    slots: int,
    devices: int,
    start: datetime,
    end: datetime,
) -> Commitment:
    """Record what a reservation commits its tenant to (in the transaction that makes it)."""
    return Commitment.objects.create(
        reservation_uid=reservation_uid,
        tenant_id=tenant_id,
        name=name,
        package_id=package_id,
        region=region,
        slots=slots,
        devices=devices,
        start=start,
        end=end,
    )


def withdraw(reservation_uid: uuid.UUID) -> None:
    """A reservation cancelled before its start commits nothing."""
    Commitment.objects.filter(reservation_uid=reservation_uid).delete()
