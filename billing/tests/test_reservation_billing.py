"""A reservation's slot is billed while it holds devices (ARCHITECTURE §22): a unit on it by its
own meter (the reservation's used time, its rows cut at the reservation's end and tagged), a
placeholder holding it by a meter of the slot's (its unused time); a slot that holds nothing
bills nothing. What a reservation can still cost is its commitment, which budgets, forecasts
and statements count from the moment it is made."""

from __future__ import annotations

import csv
import io
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing import budgets, exporting, ledger, statements
from billing.models import ReservationUse, UsageRecord
from billing.tests.helpers import holding, priced
from runtime import usage_audit
from runtime.models import GPUUnit
from runtime.tests.factories import UnitFactory
from tenancy.errors import BudgetExceeded
from tenancy.models import BudgetMode, Tenant
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
END = T0 + timedelta(hours=3)
RESERVATION = uuid.UUID("5e5e5e5e-0000-4000-8000-000000000001")


def _unit(package, name: str, tenant) -> GPUUnit:
    return UnitFactory(name=name, package=package, tenant=tenant)


def _on_reservation(unit: GPUUnit, start, end) -> None:
    held = replace(holding(unit), reservation_uid=RESERVATION, reservation_end=END)
    assert ledger.open_meter(held, at=start)
    ledger.close_meter(unit.uid, at=end)


def _placeholder(tenant, package, slot: int, start, end, *, pod: str) -> None:
    """The slot's placeholder held its devices from `start` to `end`, as beat's pass meters it."""
    uid = ledger.slot_resource_uid(RESERVATION, slot)
    held = ledger.Holding(
        unit_uid=uid,
        unit_name=f"window/{slot}",
        tenant_id=tenant.pk,
        package_id=package.id,
        claim_uid=f"claim-{pod}",
        region="default",
        pod_uid=pod,
        devices=[{"pool": "n", "device": "gpu-0"}, {"pool": "n", "device": "gpu-1"}],
        count=2,
        reservation_uid=RESERVATION,
        reservation_end=END,
        placeholder=True,
    )
    assert ledger.open_meter(held, at=start, floor=ledger.billed_until([uid]).get(uid))
    ledger.close_meter(uid, at=end)


def test_a_slot_is_billed_while_it_holds_devices_by_a_unit_or_its_placeholder():
    package = priced("res-pack", "3.00", count=2, gpu=2)
    tenant = TenantFactory()
    first, second = _unit(package, "first", tenant), _unit(package, "second", tenant)
    # Slot 0: its placeholder held the devices 10:00-10:30, handed them over to `first`, which
    # ran 10:30-12:00; the placeholder held them again 12:00 to the end.
    _placeholder(tenant, package, 0, T0, T0 + timedelta(minutes=30), pod="p0")
    _on_reservation(first, T0 + timedelta(minutes=30), T0 + timedelta(hours=2))
    _placeholder(tenant, package, 0, T0 + timedelta(hours=2), END, pod="p0-again")
    # Slot 1: no device was free before 11:15 (nothing held, nothing billed); its placeholder
    # held them 11:15-12:30; `second` ran from 12:30 on past the end, to 14:00.
    _placeholder(
        tenant,
        package,
        1,
        T0 + timedelta(hours=1, minutes=15),
        T0 + timedelta(hours=2, minutes=30),
        pod="p1",
    )
    _on_reservation(second, T0 + timedelta(hours=2, minutes=30), END + timedelta(hours=1))

    after = UsageRecord.objects.filter(unit_uid=second.uid, start__gte=END)
    assert {(r.reservation_uid, r.reservation_status) for r in after} == {(None, "")}
    used = UsageRecord.objects.filter(reservation_status=ReservationUse.USED)
    assert {r.unit_uid for r in used} == {first.uid, second.uid}
    assert max(r.end for r in used) == END  # cut at the reservation's end
    unused = UsageRecord.objects.filter(reservation_status=ReservationUse.UNUSED)
    held = sorted((r.unit_name, r.start, r.end) for r in unused)
    assert [(name, (end - start).total_seconds()) for name, start, end in held] == [
        ("window/0", 1800.0),  # 10:00-10:30
        ("window/0", 3600.0),  # 12:00-13:00
        ("window/1", 2700.0),  # 11:15-12:00 (cut at the hour)
        ("window/1", 1800.0),  # 12:00-12:30
    ]
    in_window = UsageRecord.objects.filter(reservation_uid=RESERVATION)
    # 6 slot-hours, 75 minutes of which held nothing (slot 1 before 11:15): 4.75 h at 3.00.
    assert sum(r.cost for r in in_window) == Decimal("14.25")
    assert sum(r.quantity for r in unused) == Decimal((1800 + 3600 + 2700 + 1800) * 2)

    # The usage audit reads units' time only: the unused slot time is no unit's pod's. (The
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
        ("Used", "GPU unit", str(RESERVATION)),
        ("Unused", "Capacity reservation", str(RESERVATION)),
        ("", "GPU unit", ""),  # the second unit's hour after the end: on demand
    }


def _budgeted(mode: str) -> Tenant:
    tenant = TenantFactory()
    Tenant.objects.filter(pk=tenant.pk).update(monthly_budget=Decimal("100"), budget_mode=mode)
    tenant.refresh_from_db()
    return tenant


def _commit(tenant, package, *, slots: int, start, end, name: str = "window"):
    return ledger.commit(
        reservation_uid=uuid.uuid4(),
        tenant_id=tenant.pk,
        name=name,
        package_id=package.id,
        region="default",
        slots=slots,
        devices=package.count,
        start=start,
        end=end,
    )


def test_a_commitment_counts_in_the_budget_forecast_and_statement_at_once():
    package = priced("commit-pack", "2.00", count=1, gpu=1)
    tenant = _budgeted(BudgetMode.ALERT)
    now = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
    before = budgets.budget_of(tenant, now=now)
    assert (before.committed, before.forecast) == (Decimal(0), Decimal(0))

    # Two slots for 30 hours from tomorrow, and one that runs on into December.
    _commit(
        tenant,
        package,
        slots=2,
        start=now + timedelta(days=1),
        end=now + timedelta(days=1, hours=30),
    )
    _commit(
        tenant,
        package,
        slots=1,
        start=datetime(2026, 11, 30, 20, tzinfo=UTC),
        end=datetime(2026, 12, 1, 6, tzinfo=UTC),
        name="late",
    )
    budget = budgets.budget_of(tenant, now=now)
    # 2 x 30 h x 2.00 + 1 x 4 h (to the month's end) x 2.00
    assert budget.committed == Decimal("128.00")
    assert budget.forecast == Decimal("128.00")
    assert budget.spent == Decimal(0)
    assert budget.reached == Decimal("128.00")  # the alerts count it: 100 % is reached
    assert budgets.committed(tenant, now=now) == Decimal("140.00")  # all of it, December too

    found = statements.statement(tenant, datetime(2026, 11, 1, tzinfo=UTC), now=now)
    assert [(c.commitment.name, c.cost) for c in found.committed] == [
        ("window", Decimal("120.00")),
        ("late", Decimal("8.00")),
    ]
    assert found.total == Decimal(0)  # nothing billed yet
    december = statements.statement(tenant, datetime(2026, 12, 1, tzinfo=UTC), now=now)
    assert [(c.commitment.name, c.cost) for c in december.committed] == [("late", Decimal("12.00"))]

    # An alert budget warns (beat's pass records 50, 80 and 100 %), never enforces.
    assert budgets.check_budgets(now=now) == []
    assert {a.threshold for a in budgets.budget_of(tenant, now=now).alerts} == {50, 80, 100}


def test_an_enforced_budget_refuses_a_reservation_that_would_pass_it():
    package = priced("enforce-pack", "2.00", count=1, gpu=1)
    tenant = _budgeted(BudgetMode.ENFORCE)
    now = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
    fits = budgets.commitment_problem(
        tenant, package_id=package.id, slots=1, start=now, end=now + timedelta(hours=40), now=now
    )
    assert fits is None  # 80.00
    _commit(tenant, package, slots=1, start=now, end=now + timedelta(hours=40))
    refused = budgets.commitment_problem(
        tenant, package_id=package.id, slots=1, start=now, end=now + timedelta(hours=11), now=now
    )
    assert isinstance(refused, BudgetExceeded)
    assert refused.details == {
        "limit": "100.00",
        "spent": "0.00",
        "committed": "80.00",
        "requested": "22.00",
    }
    # What falls in another month is that month's.
    later = budgets.commitment_problem(
        tenant,
        package_id=package.id,
        slots=1,
        start=datetime(2026, 12, 2, tzinfo=UTC),
        end=datetime(2026, 12, 20, tzinfo=UTC),
        now=now,
    )
    assert later is None
