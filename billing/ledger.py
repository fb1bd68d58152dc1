"""Writing the usage ledger. The runtime calls `open_meter` when a unit reaches Running on
allocated devices and `close_meter` when it leaves Running (in the same transaction as the
phase change, whoever made it: observer, reconcile, an action); beat's `seal_meters` writes
the whole hours running meters have passed; after each reconcile (the full pass, or a page of
the backstop for the meters of its units) the runtime marks the meters of units it saw Running
(`mark_seen`), opens what an event missed (`open_missed`) and closes, at the last time seen
Running, what one left open (`close_dangling`).

Each call costs a constant number of statements, whatever the size of the fleet.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction

from billing import periods, prices
from billing.models import Meter, QuantityUnit, UsageRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Holding:
    """What a Running unit holds, as the runtime observed it."""

    unit_uid: uuid.UUID
    unit_name: str
    tenant_id: int
    package_id: str
    claim_uid: str
    alternative: str = ""
    # [{pool, device, shareID?, consumedCapacity?}]
    devices: list[dict] = field(default_factory=list)
    count: int = 1

    @property
    def shared(self) -> bool:
        return any(device.get("shareID") for device in self.devices)


def _meter(holding: Holding, at: datetime) -> Meter:
    return Meter(
        unit_uid=holding.unit_uid,
        unit_name=holding.unit_name,
        tenant_id=holding.tenant_id,
        package_id=holding.package_id,
        alternative=prices.price_key(holding.alternative),
        claim_uid=holding.claim_uid,
        devices=[
            {k: d[k] for k in ("pool", "device", "shareID", "consumedCapacity") if k in d}
            for d in holding.devices
        ],
        quantity_unit=QuantityUnit.SHARE_SECONDS if holding.shared else QuantityUnit.DEVICE_SECONDS,
        count=len(holding.devices) or holding.count,
        opened_at=at,
        started_at=at,
        seen_at=at,
    )


def open_meter(holding: Holding, *, at: datetime) -> None:
    """Start metering a unit that reached Running. A meter still open from before (the event
    of its leaving Running was missed) is closed first, when it was last seen Running, so the
    time it was not Running is never billed. Two statements when none is open."""
    if Meter.objects.filter(unit_uid=holding.unit_uid).exists():
        close_dangling([holding.unit_uid])
    Meter.objects.bulk_create([_meter(holding, at)], ignore_conflicts=True)


def _records(meter: Meter, end: datetime, versions: prices.Versions) -> list[UsageRecord]:
    from_versions = prices.versions_of(versions, meter.package_id, meter.alternative)
    return [
        UsageRecord(
            id=periods.record_id(meter.unit_uid, meter.claim_uid, piece.start),
            tenant_id=meter.tenant_id,
            unit_uid=meter.unit_uid,
            unit_name=meter.unit_name,
            package_id=meter.package_id,
            alternative=meter.alternative,
            claim_uid=meter.claim_uid,
            devices=meter.devices,
            start=piece.start,
            end=piece.end,
            seconds=piece.seconds,
            quantity=piece.quantity,
            quantity_unit=meter.quantity_unit,
            price_version=piece.version,  # type: ignore[misc]
            hourly=piece.hourly,
            currency=piece.version.currency  # type: ignore[attr-defined]
            if piece.version is not None
            else settings.BILLING_CURRENCY,
            cost=piece.cost,
        )
        for piece in periods.priced_pieces(
            meter.started_at, end, count=meter.count, versions=from_versions
        )
    ]


def close_meter(unit_uid: uuid.UUID, *, at: datetime) -> list[UsageRecord]:
    """Stop metering a unit that left Running at `at`: its time since the last seal written
    as records, the meter gone. Nothing when no meter is open. Four statements."""
    with transaction.atomic():
        meter = Meter.objects.select_for_update().filter(unit_uid=unit_uid).first()
        if meter is None:
            return []
        records = _records(meter, at, prices.versions_for([meter.package_id]))
        UsageRecord.objects.bulk_create(records, ignore_conflicts=True)
        Meter.objects.filter(pk=meter.pk).delete()
    return records


def seal_meters(*, now: datetime) -> int:
    """Write the whole UTC hours open meters have run through, so usage reaches the ledger
    (and exports) within the hour even for units that run for weeks; returns the records
    written. Only hours a reconcile has seen the unit Running through are sealed (up to
    the hour of its `seen_at`), so a meter whose end an event missed never seals time the
    unit did not run. Meters being closed meanwhile are skipped (their close writes the same
    rows). A constant number of statements, whatever the number of meters."""
    boundary = periods.floor_hour(now)
    with transaction.atomic():
        meters = [
            meter
            for meter in Meter.objects.select_for_update(skip_locked=True).filter(
                started_at__lt=boundary
            )
            if periods.floor_hour(min(meter.seen_at, now)) > meter.started_at
        ]
        if not meters:
            return 0
        versions = prices.versions_for(m.package_id for m in meters)
        records = []
        sealed: dict[datetime, list[int]] = {}
        for meter in meters:
            until = periods.floor_hour(min(meter.seen_at, now))
            records += _records(meter, until, versions)
            sealed.setdefault(until, []).append(meter.pk)
        UsageRecord.objects.bulk_create(records, ignore_conflicts=True)
        for until, pks in sealed.items():
            Meter.objects.filter(pk__in=pks).update(started_at=until)
    return len(records)


def open_meter_uids(among: Iterable[uuid.UUID] | None = None) -> set[uuid.UUID]:
    """The units with an open meter; with `among`, only those of these units (a queryset of
    uids stays one statement: a subquery)."""
    meters = Meter.objects.all() if among is None else Meter.objects.filter(unit_uid__in=among)
    return set(meters.values_list("unit_uid", flat=True))


def mark_seen(unit_uids: Iterable[uuid.UUID], *, at: datetime) -> None:
    """A reconcile saw these units Running at `at` (one statement)."""
    uids = list(unit_uids)
    if uids:
        Meter.objects.filter(unit_uid__in=uids).update(seen_at=at)


def open_missed(holdings: Iterable[Holding], *, at: datetime) -> int:
    """Meter units found Running without a meter (an event missed their start, or they ran
    before billing was deployed) from `at`: the earlier time is unknown, and a warning says so."""
    missed = list(holdings)
    if missed:
        logger.warning(
            "%d running unit(s) had no open meter; metering them from %s: %s",
            len(missed),
            at.isoformat(),
            ", ".join(h.unit_name for h in missed[:10]),
        )
        Meter.objects.bulk_create([_meter(h, at) for h in missed], ignore_conflicts=True)
    return len(missed)


def close_dangling(unit_uids: Iterable[uuid.UUID]) -> int:
    """Close the meters of units found not Running (an event missed their end) at the last
    time a reconcile saw them Running; returns how many."""
    closed = 0
    for meter in Meter.objects.filter(unit_uid__in=list(unit_uids)):
        logger.warning(
            "closing the meter of %s at %s, when it was last seen running",
            meter.unit_name,
            meter.seen_at.isoformat(),
        )
        closed += bool(close_meter(meter.unit_uid, at=max(meter.seen_at, meter.started_at)))
    return closed


def correction_for(record: UsageRecord, *, note: str) -> UsageRecord:
    """The correction of `record`, unsaved: a row like it with seconds, quantity and cost
    negated, pointing at it (FOCUS ChargeClass=Correction), its id derived from the record's
    so a record is corrected at most once."""
    return UsageRecord(
        id=uuid.uuid5(periods.RECORD_NAMESPACE, f"correction/{record.id}"),
        tenant_id=record.tenant_id,
        unit_uid=record.unit_uid,
        unit_name=record.unit_name,
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
    correction.save(force_insert=True)
    return correction
