"""Monthly statements: the lines of a tenant's month (per unit, package, price version, and
corrections apart), totals that equal the ledger and the FOCUS export of the same month to the
micro-unit, as JSON and CSV; a bad month is a 400."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import exporting, ledger
from billing.models import UsageRecord
from billing.tests.helpers import hold, priced
from runtime.models import UnitPhase
from runtime.tests.factories import UnitFactory
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = pytest.mark.django_db


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def november(tenant):
    """The tenant's November: a unit across a price change, another across the month's end
    (its December part is not November's), a reversed row, and another tenant's usage."""
    h100 = priced("h100-2x", "3.60")
    l40s = priced("l40s-1x", "1.00")
    trainer = UnitFactory(tenant=tenant, name="trainer", package=h100, phase=UnitPhase.STOPPED)
    hold(trainer, at("2026-11-03 10:15"), at("2026-11-03 12:40"))
    hold(trainer, at("2026-11-20 08:00"), at("2026-11-20 08:30"))
    late = UnitFactory(tenant=tenant, name="late", package=l40s, phase=UnitPhase.STOPPED)
    hold(late, at("2026-11-30 22:00"), at("2026-12-01 02:00"))
    wrong = UsageRecord.objects.filter(unit_uid=trainer.uid, start=at("2026-11-20 08:00")).get()
    ledger.reverse(wrong, note="a test's correction")
    other = TenantFactory()
    theirs = UnitFactory(tenant=other, name="theirs", package=h100, phase=UnitPhase.STOPPED)
    hold(theirs, at("2026-11-10 00:00"), at("2026-11-10 05:00"))
    return tenant


def test_a_statement_has_a_line_per_unit_package_and_price_and_totals_like_the_ledger(november):
    body = client_for(november).get("/api/v1/usage/statements/2026-11").json()["data"]

    assert body["month"] == "2026-11"
    assert body["from"] == "2026-11-01T00:00:00Z"
    assert body["to"] == "2026-12-01T00:00:00Z"
    assert body["final"] is True
    lines = [(line["unit"], line["kind"], line["cost"]) for line in body["lines"]]
    assert lines == [
        ("late", "usage", "2.000000"),  # 22:00-24:00 of 30 November only
        ("trainer", "usage", "10.500000"),  # 2 h 25 min + 30 min at 3.60
        ("trainer", "correction", "-1.800000"),
    ]
    trainer = body["lines"][1]
    assert trainer["unitPrice"] == "3.6000"
    assert trainer["quantityUnit"] == "device-seconds"
    assert Decimal(trainer["seconds"]) == Decimal(175 * 60)
    assert body["total"] == "10.700000"

    # The ledger and the FOCUS export of the month say the same, to the micro-unit.
    rows = UsageRecord.objects.filter(
        tenant=november, start__gte=at("2026-11-01 00:00"), start__lt=at("2026-12-01 00:00")
    )
    assert sum((row.cost for row in rows), Decimal(0)) == Decimal(body["total"])
    out = io.BytesIO()
    exporting.copy_to("focus-csv", at("2026-11-01 00:00"), at("2026-12-01 00:00"), out)
    focus = [
        row
        for row in csv.DictReader(io.StringIO(out.getvalue().decode()))
        if row["SubAccountId"] == november.slug
    ]
    billed = sum((Decimal(row["BilledCost"]) for row in focus), Decimal(0))
    assert billed == Decimal(body["total"])


def test_a_month_with_a_running_unit_totals_what_the_quota_and_overview_say(tenant, monkeypatch):
    now = at("2026-11-28 12:30")
    monkeypatch.setattr(timezone, "now", lambda: now)
    h100 = priced("h100-2x", "3.60")
    done = UnitFactory(tenant=tenant, name="done", package=h100, phase=UnitPhase.STOPPED)
    hold(done, at("2026-11-03 10:00"), at("2026-11-03 11:00"))
    live = UnitFactory(tenant=tenant, name="live", package=h100, phase=UnitPhase.RUNNING)
    hold(live, now - timedelta(minutes=50), None)  # 50 minutes, none of it sealed
    client = client_for(tenant)

    body = client.get("/api/v1/usage/statements/2026-11").json()["data"]
    quota = client.get("/api/v1/quota").json()["data"]

    assert body["final"] is False
    assert body["total"] == "3.600000"  # the sealed hour
    assert body["running"] == "3.000000"  # 50 minutes at 3.60
    assert body["totalSoFar"] == "6.600000" == quota["costThisMonth"]
    page = client_for(tenant).get("/api/v1/usage/statements/2026-11", {"format": "csv"})
    assert page.status_code == 200


def test_a_statement_as_csv_ends_with_its_total(november):
    response = client_for(november).get(
        "/api/v1/usage/statements/2026-11", {"format": "csv"}, HTTP_ACCEPT="text/csv"
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "statement-" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["kind"] for row in rows] == ["usage", "usage", "correction", "total"]
    assert rows[-1]["cost"] == "10.700000"
    assert sum(Decimal(row["cost"]) for row in rows[:-1]) == Decimal("10.700000")


def test_a_month_without_usage_is_an_empty_statement(tenant):
    body = client_for(tenant).get("/api/v1/usage/statements/2025-01").json()["data"]
    assert body["lines"] == []
    assert body["total"] == "0.000000"


@pytest.mark.parametrize("month", ["2026-13", "november", "2026-1-01", "0000-01"])
def test_a_bad_month_is_a_400_naming_it(tenant, month):
    response = client_for(tenant).get(f"/api/v1/usage/statements/{month}")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert "month" in error["details"]["fields"]
