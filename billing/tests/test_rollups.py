"""Rollups: kept by every ledger write (meters closed, hours sealed, corrections), equal to a
recount of the ledger, read by usage, statements and costs with the same statements however
many rows there are, and a rollup that drifts is reported by the audit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import ledger, periods, rollups, selectors, statements
from billing.models import Grain, PackageRollup, UnitRollup, UsageRecord
from billing.tests.helpers import hold, priced
from runtime.models import UnitPhase
from runtime.tests.factories import UnitFactory

pytestmark = pytest.mark.django_db


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def usage(tenant):
    """Two units over a day and a month boundary: one closed, one sealed hourly then closed,
    and a correction."""
    h100 = priced("h100-2x", "3.60")
    l40s = priced("l40s-1x", "1.00")
    trainer = UnitFactory(tenant=tenant, name="trainer", package=h100, phase=UnitPhase.STOPPED)
    hold(trainer, at("2026-10-31 22:10"), at("2026-11-01 01:50"))
    hold(trainer, at("2026-11-20 08:00"), at("2026-11-20 08:30"))
    server = UnitFactory(tenant=tenant, name="server", package=l40s, phase=UnitPhase.RUNNING)
    hold(server, at("2026-11-29 23:30"), None)
    ledger.mark_seen([server.uid], at=at("2026-11-30 03:20"))
    assert ledger.seal_meters(now=at("2026-11-30 03:20")) == 4  # the hours up to 03:00
    ledger.close_meter(server.uid, at=at("2026-11-30 03:20"))
    wrong = UsageRecord.objects.get(unit_uid=trainer.uid, start=at("2026-11-20 08:00"))
    ledger.reverse(wrong, note="refund")
    return tenant, trainer, server


def naive(tenant, start: datetime, end: datetime) -> dict[str, Decimal]:
    """Cost by unit from every ledger row, each counted for its part inside the period."""
    costs: dict[str, Decimal] = {}
    for row in UsageRecord.objects.filter(tenant=tenant):
        inside = periods.seconds(max(row.start, start), min(row.end, end))
        if inside > 0:
            share = inside / periods.seconds(row.start, row.end)
            part = (row.cost * share).quantize(periods.COST_PLACES)
            costs[row.unit_name] = costs.get(row.unit_name, Decimal(0)) + part
    return costs


def test_every_ledger_write_keeps_the_rollups_equal_to_a_recount(usage):
    tenant, trainer, _ = usage
    assert (
        UsageRecord.objects.filter(tenant=tenant).count() == 11
    )  # 4 + 1 + a correction, 4 sealed + 1
    assert rollups.differences(tenant_id=tenant.pk) == []
    month = UnitRollup.objects.get(
        unit_uid=trainer.uid, grain=Grain.MONTH, period=at("2026-11-01").date(), correction=True
    )
    assert (month.records, month.cost) == (1, Decimal("-1.800000"))
    days = PackageRollup.objects.filter(tenant=tenant, grain=Grain.DAY, package_id="l40s-1x")
    assert {row.period.isoformat(): row.cost for row in days} == {
        "2026-11-29": Decimal("0.500000"),
        "2026-11-30": Decimal("3.333333"),
    }
    # A rebuild from the ledger writes the same rows.
    before = set(UnitRollup.objects.values_list("unit_uid", "grain", "period", "cost"))
    rollups.rebuild()
    assert set(UnitRollup.objects.values_list("unit_uid", "grain", "period", "cost")) == before


@pytest.mark.parametrize(
    ("start", "end", "now"),
    [
        ("2026-11-01 00:00", "2026-11-30 03:20", "2026-11-30 03:20"),  # this month, to now
        ("2026-10-31 22:30", "2026-11-30 02:15", "2026-12-05 00:00"),  # edges cut rows
        ("2026-11-01 00:30", "2026-11-01 01:10", "2026-12-05 00:00"),  # within an hour
        ("2026-10-01 00:00", "2026-12-01 00:00", "2026-12-05 00:00"),  # whole months
    ],
)
def test_usage_read_through_rollups_equals_the_ledger_row_by_row(usage, start, end, now):
    tenant, _, _ = usage
    found = selectors.usage(
        tenant=tenant, start=at(start), end=at(end), group_by="unit", now=at(now)
    )
    got = {key[1]: totals.cost for key, totals in found.groups.items() if totals.cost}
    want = naive(tenant, at(start), at(end))
    assert got == {name: cost for name, cost in want.items() if cost}
    assert got  # every period holds some usage
    by_day = selectors.usage(
        tenant=tenant, start=at(start), end=at(end), group_by="day", now=at(now)
    )
    assert by_day.total.cost == found.total.cost


def test_statements_and_costs_read_the_rollups(usage):
    tenant, trainer, _ = usage
    found = statements.statement(tenant, at("2026-11-01"), now=at("2026-11-30 03:20"))
    assert [(line.unit_name, line.correction, line.cost) for line in found.lines] == [
        ("server", False, Decimal("3.833333")),  # 3 h 50 min at 1.00
        ("trainer", False, Decimal("8.400000")),  # November's 1 h 50 min + 30 min at 3.60
        ("trainer", True, Decimal("-1.800000")),
    ]
    ledger_total = sum(
        UsageRecord.objects.filter(
            tenant=tenant, start__gte=at("2026-11-01"), start__lt=at("2026-12-01")
        ).values_list("cost", flat=True),
        Decimal(0),
    )
    assert found.total == ledger_total
    costs = selectors.cost_to_date([trainer.uid], now=at("2026-11-30 03:20"))
    assert costs[trainer.uid] == sum(
        UsageRecord.objects.filter(unit_uid=trainer.uid).values_list("cost", flat=True),
        Decimal(0),
    )
    with pytest.raises(ValueError, match="not the start of a UTC month"):
        selectors.costs_by_tenant(now=at("2026-11-30 03:20"), since=at("2026-11-02"))


def test_readers_make_the_same_statements_for_ten_rows_or_a_thousand(tenant):
    package = priced("h100-2x", "3.60")
    now = at("2026-11-30 12:00")

    def statements_for_readers() -> list[int]:
        counts = []
        for group_by in ("unit", "day", "package"):
            with CaptureQueriesContext(connection) as log:
                selectors.usage(
                    tenant=tenant, start=at("2026-11-01"), end=now, group_by=group_by, now=now
                )
            counts.append(len(log.captured_queries))
        with CaptureQueriesContext(connection) as log:
            statements.statement(tenant, at("2026-11-01"), now=now)
            selectors.tenant_costs(tenant, now=now, since=at("2026-11-01"))
        counts.append(len(log.captured_queries))
        return counts

    def run_for(unit_name: str, hours: int) -> None:
        unit = UnitFactory(tenant=tenant, name=unit_name, package=package)
        start = at("2026-11-01 00:00")
        hold(unit, start, start + timedelta(hours=hours))

    run_for("small", 10)
    small = statements_for_readers()
    for n in range(4):
        run_for(f"large-{n}", 250)
    assert UsageRecord.objects.filter(tenant=tenant).count() == 1010
    assert statements_for_readers() == small


def test_a_rollup_that_drifts_from_the_ledger_is_reported_by_the_audit(usage, capsys):
    tenant, trainer, _ = usage
    # A window without usage (no timeline to compare), whose month's rollups are checked.
    window = ["--from", "2026-11-25T00:00:00+00:00", "--to", "2026-11-26T00:00:00+00:00"]
    call_command("audit_usage", *window)
    assert "0 rollup(s) differ" in capsys.readouterr().out
    UnitRollup.objects.filter(
        unit_uid=trainer.uid,
        grain=Grain.MONTH,
        period=at("2026-11-01").date(),
        correction=False,
    ).update(cost=Decimal("99"))
    (drift,) = [d for d in rollups.differences(tenant_id=tenant.pk) if d.model == "UnitRollup"]
    assert drift.stored[3] == Decimal("99")
    assert drift.expected[3] != Decimal("99")
    with pytest.raises(CommandError, match="rollups differ"):
        call_command("audit_usage", *window)
    assert "1 rollup(s) differ" in capsys.readouterr().out
