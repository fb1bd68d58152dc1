"""A reservation is billed for its whole window, used or not (ARCHITECTURE §22): its units'
time in the window is its used time (their rows cut at its end and tagged), and what no unit
used of each slot is billed as the reservation's unused time, so the two together are every
slot's window at the package's price, exactly once; FOCUS names both."""

from __future__ import annotations

import csv
import io
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing import exporting, ledger
from billing.models import ReservationUse, UsageRecord
from billing.tests.helpers import holding, priced
from runtime import usage_audit
from runtime.models import GPUUnit
from runtime.tests.factories import UnitFactory
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
END = T0 + timedelta(hours=3)


def _unit(package, name: str, tenant) -> GPUUnit:
    return UnitFactory(name=name, package=package, tenant=tenant)


def _on_reservation(unit: GPUUnit, reserved: ledger.Reserved, start, end) -> None:
    held = replace(holding(unit), reservation_uid=reserved.uid, reservation_end=reserved.end)
    ledger.open_meter(held, at=start)
    ledger.close_meter(unit.uid, at=end)


def test_a_reservation_bills_every_slot_for_its_window_once_used_or_not():
    package = priced("res-pack", "3.00", count=2, gpu=2)
    tenant = TenantFactory()
    first, second = _unit(package, "first", tenant), _unit(package, "second", tenant)
    reserved = ledger.Reserved(
        uid=uuid.UUID("5e5e5e5e-0000-4000-8000-000000000001"),
        name="window",
        tenant_id=first.tenant_id,
        package_id=package.id,
        region="default",
        slots=2,
        devices=2,
        start=T0,
        end=END,
    )
    # Slot 0 used 10:30-12:00; slot 1 used from 12:30, running on past the end to 14:00.
    _on_reservation(first, reserved, T0 + timedelta(minutes=30), T0 + timedelta(hours=2))
    _on_reservation(second, reserved, T0 + timedelta(hours=2, minutes=30), END + timedelta(hours=1))
    after = UsageRecord.objects.filter(unit_uid=second.uid, start__gte=END)
    assert {(r.reservation_uid, r.reservation_status) for r in after} == {(None, "")}
    used = UsageRecord.objects.filter(reservation_status=ReservationUse.USED)
    assert {r.unit_uid for r in used} == {first.uid, second.uid}
    assert max(r.end for r in used) == END  # cut at the reservation's end

    written = ledger.charge_reservation(reserved, slot_of={first.uid: 0, second.uid: 1})
    unused = UsageRecord.objects.filter(reservation_status=ReservationUse.UNUSED)
    assert len(written) == unused.count() > 0
    gaps = sorted((r.unit_name, r.start, r.end) for r in unused)
    assert [(name, (end - start).total_seconds()) for name, start, end in gaps] == [
        ("window/0", 1800.0),  # 10:00-10:30
        ("window/0", 3600.0),  # 12:00-13:00
        ("window/1", 3600.0),  # 10:00-11:00 (cut at the hour)
        ("window/1", 3600.0),  # 11:00-12:00
        ("window/1", 1800.0),  # 12:00-12:30
    ]
    in_window = UsageRecord.objects.filter(reservation_uid=reserved.uid)
    # Two slots, three hours, 3.00 an hour each: 18.00, whoever used them.
    assert sum(r.cost for r in in_window) == Decimal("18.00")
    # 4 of the 6 slot-hours went unused, 2 devices each: device-seconds.
    assert sum(r.quantity for r in unused) == Decimal(4 * 3600 * 2)
    # Once: charged again, the same rows (by id), nothing added.
    before = unused.count()
    ledger.charge_reservation(reserved, slot_of={first.uid: 0, second.uid: 1})
    assert UsageRecord.objects.filter(reservation_status=ReservationUse.UNUSED).count() == before
    # The usage audit reads units' time only: the unused slot time is nobody's pod's. (The
    # units here have no timeline: the ledger was written directly, so the audit names them.)
    found = usage_audit.audit(T0 - timedelta(days=1), END + timedelta(days=1), now=END)
    assert {d.unit_uid for d in found} == {str(first.uid), str(second.uid)}

    out = io.BytesIO()
    exporting.copy_to("focus-csv", T0 - timedelta(days=1), END + timedelta(days=1), out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue().decode())))
    by_kind = {
        (row["CapacityReservationStatus"], row["ResourceType"], row["CapacityReservationId"])
        for row in rows
    }
    assert by_kind == {
        ("Used", "GPU unit", str(reserved.uid)),
        ("Unused", "Capacity reservation", str(reserved.uid)),
        ("", "GPU unit", ""),  # the second unit's hour after the end: on demand
    }
