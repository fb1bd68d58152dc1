"""Cost on the dashboard, over ledger rows written by billing.ledger at known times: to date on
the unit page and in the units list, the tenant's totals and the usage chart on the overview,
every tenant's on the operators' usage page; statement counts flat in units and tenants."""

from __future__ import annotations

import html
import re
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing import ledger
from billing.budgets import check_budgets
from billing.tests.helpers import hold, priced
from dashboard.tests.conftest import client_for, make_unit, make_user
from dashboard.tests.test_views import OVERVIEW, ROWS, UNITS, count_queries, detail
from runtime.models import GPUUnit, UnitPhase
from tenancy.models import Tenant
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

USAGE = "/usage/"
# The clock of every test here: late in November, so October is last month and inside the
# chart's thirty days.
NOW = datetime(2026, 11, 28, 12, 0, 30, tzinfo=UTC)


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: NOW)


@pytest.fixture
def h100(db):
    return priced("h100-2x", "3.60")


@pytest.fixture
def l40s(db):
    return priced("l40s-1x", "1.00")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def used(tenant, other_tenant, h100, l40s):
    """The tenant's usage: 3.60 on 20 Oct (before the chart), 3.60 on 30 Oct, 5.40 + 2.00 on
    27 Nov, and 1.00 so far on 28 Nov from a unit still running. 15.60 to date, 8.40 this
    month. The other tenant's 36.00 is not the tenant's."""
    trainer = make_unit(tenant, "trainer", package=h100, phase=UnitPhase.STOPPED)
    hold(trainer, at("2026-10-20 08:00"), at("2026-10-20 09:00"))
    hold(trainer, at("2026-10-30 10:00"), at("2026-10-30 11:00"))
    hold(trainer, at("2026-11-27 10:30"), at("2026-11-27 12:00"))
    small = make_unit(tenant, "small", package=l40s)
    hold(small, at("2026-11-27 20:00"), at("2026-11-27 22:00"))
    hold(small, at("2026-11-28 11:00"), None)
    theirs = make_unit(other_tenant, "theirs", package=h100, phase=UnitPhase.STOPPED)
    hold(theirs, at("2026-11-27 00:00"), at("2026-11-27 10:00"))
    return {"trainer": trainer, "small": small, "theirs": theirs}


def money(body: str, cls: str) -> str:
    """The money shown in the first element of class `cls`: its text and its exact title."""
    part = body.split(f'class="{cls}"', 1)[1]
    found = re.search(r'<data class="money" value="([^"]+)" title="([^"]+)">([^<]+)</data>', part)
    assert found, part[:300]
    return f"{found[3]} ({found[2]})"


def row_of(body: str, unit: str) -> str:
    return body.split(f'data-unit="{unit}"')[1].split("</tr>")[0]


class TestUnitCost:
    def test_unit_page_shows_its_cost_to_date(self, member_client, used):
        body = member_client.get(detail(used["trainer"])).content.decode()
        assert "<dt>Cost to date</dt>" in body
        assert money(body, "unit-cost") == "USD 12.60 (USD 12.600000)"
        assert "running, counted to" not in body

    def test_a_running_units_cost_is_counted_to_the_minute(self, member_client, used):
        body = member_client.get(detail(used["small"])).content.decode()
        # 2.00 on 27 Nov and 11:00 to 12:00 (the minute of NOW) on 28 Nov.
        assert money(body, "unit-cost") == "USD 3.00 (USD 3.000000)"
        assert '· running, counted to <time datetime="2026-11-28T12:00:00+00:00">12:00</time>' in (
            body
        )

    def test_a_unit_that_never_ran_costs_nothing(self, member_client, tenant):
        unit = make_unit(tenant, "waiting", phase=UnitPhase.PENDING)
        body = member_client.get(detail(unit)).content.decode()
        assert money(body, "unit-cost") == "USD 0.00 (USD 0.000000)"

    @pytest.mark.parametrize("path", [UNITS, ROWS])
    def test_units_list_has_a_cost_column(self, member_client, used, path):
        body = member_client.get(path, {"phase": "all"}).content.decode()
        assert '<th scope="col" role="columnheader" class="num">Cost to date</th>' in body
        assert money(row_of(body, "trainer"), "num unit-cost") == "USD 12.60 (USD 12.600000)"
        assert money(row_of(body, "small"), "num unit-cost") == "USD 3.00 (USD 3.000000)"
        assert 'data-label="Cost to date"' in row_of(body, "small")
        assert "theirs" not in body

    def test_staff_see_every_tenants_unit_costs(self, staff_client, used):
        body = staff_client.get(UNITS, {"phase": "all"}).content.decode()
        assert money(row_of(body, "theirs"), "num unit-cost") == "USD 36.00 (USD 36.000000)"

    def test_the_live_rows_move_once_a_minute_while_a_unit_runs(
        self, member_client, used, monkeypatch
    ):
        since = member_client.get(ROWS).context["live"]["digest"]
        monkeypatch.setattr(timezone, "now", lambda: NOW + timedelta(seconds=20))
        assert member_client.get(ROWS, {"since": since}).status_code == 204
        monkeypatch.setattr(timezone, "now", lambda: NOW + timedelta(seconds=40))
        moved = member_client.get(ROWS, {"since": since})
        assert moved.status_code == 200
        assert "USD 3.02" in row_of(moved.content.decode(), "small")  # 12:01, 1.00/h


def bars(body: str, variant: str = "wide") -> dict[tuple[str, str], Decimal]:
    """The usage chart's bars as drawn: (package, day) -> cost, from the SVG's rects."""
    svg = body.split(f'<svg class="chart-{variant}"')[1].split("</svg>")[0]
    return {
        (package, day): Decimal(cost)
        for day, package, cost in re.findall(
            r'<rect class="bar series-\d" [^>]*data-day="([^"]+)" data-package="([^"]+)" '
            r'data-cost="([^"]+)"',
            svg,
        )
    }


class TestOverviewCost:
    def test_shows_the_tenants_cost_this_month_and_to_date(self, member_client, used):
        body = member_client.get(OVERVIEW).content.decode()
        figures = body.split('class="cost-figures"')[1].split("</dl>")[0]
        this_month, to_date = re.findall(r"<dd>(.*?)</dd>", figures)
        assert ">USD 8.40<" in this_month
        assert 'title="USD 8.400000"' in this_month
        assert ">USD 15.60<" in to_date
        assert "The month began 1 November, 00:00 UTC." in body
        assert USAGE not in body  # the tenants' page is for ops

    def test_shows_the_budget_its_forecast_and_alerts(self, member_client, tenant, used):
        # 8.40 this month of a 10.00 budget; `small` runs on at 1.00 an hour for the 2 days
        # and 12 hours left of November: 68.40 by the month's end.
        Tenant.objects.filter(pk=tenant.pk).update(monthly_budget=Decimal("10.00"))
        check_budgets(now=NOW)
        body = member_client.get(OVERVIEW).content.decode()
        figures = body.split('class="cost-figures"')[1].split("</dl>")[0]
        _month, _to_date, limit, forecast = re.findall(r"<dd>(.*?)</dd>", figures)
        assert ">USD 10.00<" in limit
        assert "84.0 % spent, alert" in limit
        assert ">USD 68.40<" in forecast
        assert "Budget alerts this month: 50 % on 28 November 12:00, 80 % on" in body

    def test_chart_has_a_bar_per_package_and_day_of_the_last_30_days(self, member_client, used):
        body = member_client.get(OVERVIEW).content.decode()
        assert "Usage over time" in body
        expected = {
            ("h100-2x", "2026-10-30"): Decimal("3.600000"),
            ("h100-2x", "2026-11-27"): Decimal("5.400000"),
            ("l40s-1x", "2026-11-27"): Decimal("2.000000"),
            ("l40s-1x", "2026-11-28"): Decimal("1.000000"),
        }
        assert bars(body, "wide") == expected
        assert bars(body, "narrow") == expected
        # Named and described for screen readers, with the figures as a table.
        assert '<title id="usage-chart-wide-title">Cost per UTC day by package' in body
        desc = body.split('<desc id="usage-chart-wide-desc">')[1].split("</desc>")[0]
        assert html.unescape(desc) == (
            "Cost per UTC day from 30 Oct to 28 Nov, by package: USD 12.00 in all, most on "
            "27 Nov (USD 7.40). h100-2x USD 9.00; l40s-1x USD 3.00."
        )
        table = body.split('<table class="usage-figures">')[1].split("</table>")[0]
        assert table.count("<tr>") == 5  # the head, three days with usage and the total
        assert '<time datetime="2026-11-27">27 Nov 2026</time>' in table
        assert ">USD 7.40<" in table
        assert ">h100-2x</th>" in body.split("usage-figures")[1]

    def test_no_usage_yet_says_so_instead_of_a_chart(self, member_client):
        body = member_client.get(OVERVIEW).content.decode()
        assert "No usage yet." in body
        assert "usage-chart-wide" not in body
        assert "usage-figures" not in body
        assert money(body, "cost-figures") == "USD 0.00 (USD 0.000000)"

    def test_usage_only_before_the_chart_says_so(self, member_client, tenant, h100):
        unit = make_unit(tenant, "old", package=h100, phase=UnitPhase.STOPPED)
        hold(unit, at("2026-09-01 10:00"), at("2026-09-01 11:00"))
        body = member_client.get(OVERVIEW).content.decode()
        assert "No usage in the last 30 days." in body
        assert "usage-chart-wide" not in body

    def test_staff_see_every_tenants_cost_and_the_tenants_page(self, staff_client, used):
        body = staff_client.get(OVERVIEW).content.decode()
        assert "Cost of all tenants" in body
        figures = body.split('class="cost-figures"')[1].split("</dl>")[0]
        assert ">USD 44.40<" in figures  # 8.40 + the other tenant's 36.00
        assert ">USD 51.60<" in figures
        assert bars(body)[("h100-2x", "2026-11-27")] == Decimal("41.400000")
        assert f'<a href="{USAGE}">Cost of every tenant</a>' in body


class TestUsagePage:
    def test_lists_every_tenant_with_this_month_and_to_date(self, staff_client, used, tenant):
        idle = TenantFactory(display_name="Idle & Co")
        response = staff_client.get(USAGE)
        assert response.status_code == 200
        body = response.content.decode()
        rows = {
            slug: re.findall(r'<data class="money" value="[^"]+" title="[^"]+">([^<]+)<', row)
            for slug, row in re.findall(r'<tr data-tenant="([^"]+)">(.*?)</tr>', body, re.S)
        }
        nothing = ["USD 0.00", "USD 0.00"]
        assert rows == {
            **dict.fromkeys(Tenant.objects.values_list("slug", flat=True), nothing),
            tenant.slug: ["USD 8.40", "USD 15.60"],
            used["theirs"].tenant.slug: ["USD 36.00", "USD 36.00"],
        }
        assert rows[idle.slug] == nothing
        assert list(rows) == sorted(rows)
        total = body.split("<tfoot>")[1].split("</tfoot>")[0]
        assert ">USD 44.40<" in total
        assert ">USD 51.60<" in total
        assert "Idle &amp; Co" in body  # escaped
        assert f'href="{UNITS}?tenant={tenant.slug}&amp;phase=all"' in body
        # The navigation links the page, marked as the current one.
        assert f'<a href="{USAGE}" aria-current="page">Usage</a>' in body

    def test_members_of_an_operator_tenant_see_it_without_staff_links(self, used):
        client = client_for(make_user(TenantFactory(is_operator=True)))
        body = client.get(USAGE).content.decode()
        assert 'data-tenant="' in body
        assert f"{UNITS}?tenant=" not in body  # they cannot list other tenants' units
        assert f'<a href="{USAGE}"' in client.get(OVERVIEW).content.decode()

    def test_refused_to_customers_and_not_in_their_navigation(self, member_client, used):
        response = member_client.get(USAGE)
        assert response.status_code == 404
        body = response.content.decode()
        assert "No such page" in body
        assert "USD " not in body  # an amount's currency (a space never occurs in a token)
        for page in (OVERVIEW, UNITS):
            assert f'href="{USAGE}"' not in member_client.get(page).content.decode()

    def test_anonymous_users_are_sent_to_log_in(self, client):
        assert client.get(USAGE)["Location"] == f"/accounts/login/?next={USAGE}"


def add_units(tenant, package, count: int, *, first: int = 0) -> None:
    """`count` units of the tenant with a ledger row each, every other one still running."""
    for index in range(first, first + count):
        unit = make_unit(tenant, f"unit-{index}", package=package)
        running = index % 2 == 0
        hold(unit, at("2026-11-27 10:00"), None if running else at("2026-11-27 11:30"))


class TestQueryCounts:
    """The ledger is read once for a whole page: statements flat in units and tenants."""

    @pytest.mark.parametrize("path", [UNITS, ROWS, OVERVIEW])
    @pytest.mark.parametrize("staff", [False, True])
    def test_flat_in_the_number_of_units_with_usage(self, tenant, other_tenant, h100, path, staff):
        client = client_for(make_user(tenant, staff=staff))
        add_units(tenant, h100, 2)
        add_units(other_tenant, h100, 2, first=100)
        two = count_queries(client, path)
        add_units(tenant, h100, 18, first=2)
        add_units(other_tenant, h100, 18, first=102)
        assert GPUUnit.objects.filter(tenant=tenant).count() == 20
        assert count_queries(client, path) == two

    def test_unit_page_flat_in_the_units_ledger_rows(self, member_client, tenant, h100):
        def used_unit(name: str, runs: int) -> GPUUnit:
            unit = make_unit(tenant, name, package=h100)
            for day in range(runs):
                start = at("2026-11-01 10:00") + timedelta(days=day)
                hold(unit, start, start + timedelta(minutes=90))
            hold(unit, at("2026-11-28 10:00"), None)
            return unit

        once = count_queries(member_client, detail(used_unit("once", 1)))
        assert count_queries(member_client, detail(used_unit("often", 20))) == once

    def test_usage_page_flat_in_the_number_of_tenants(self, staff_client, h100):
        add_units(TenantFactory(), h100, 2)
        two = count_queries(staff_client, USAGE)
        for _ in range(10):
            add_units(TenantFactory(), h100, 2)
        assert count_queries(staff_client, USAGE) == two


class TestStatement:
    def test_shows_the_months_lines_and_total_and_offers_the_csv(self, member_client, used):
        body = member_client.get("/statements/").content.decode()
        assert "Statement for 2026-11" in body
        assert 'data-unit="trainer"' in body
        assert 'data-unit="theirs"' not in body  # the other tenant's
        # The month so far, as the overview says it: the lines and the unsealed meter.
        lines = body.split('class="subtotal"')[1].split("</tr>")[0]
        running = body.split('class="running"')[1].split("</tr>")[0]
        total = body.split('class="total"')[1].split("</tr>")[0]
        assert ">USD 7.40<" in lines
        assert ">USD 1.00<" in running
        assert ">USD 8.40<" in total
        overview = member_client.get("/").content.decode()
        assert ">USD 8.40<" in overview.split("This month")[1].split("</div>")[0]
        assert "A unit still runs this month" in body
        assert 'href="/statements/2026-10/"' in body

        october = member_client.get("/statements/2026-10/").content.decode()
        assert ">USD 7.20<" in october.split('class="total"')[1]

        response = member_client.get("/statements/2026-11.csv")
        assert response["Content-Type"].startswith("text/csv")
        rows = response.content.decode().splitlines()
        assert rows[0].startswith("month,unit,unitUid,package")
        assert rows[-1] == "2026-11,,,,,,total,,,,,,,7.400000,USD"

    def test_a_bad_month_is_not_found(self, member_client, tenant):
        assert member_client.get("/statements/2026-13/").status_code == 404


def test_the_statement_lists_what_reservations_commit_apart_from_its_lines(member_client, tenant):
    """Issue 40, hole 4: a reservation's cost showed nowhere until its window ended."""
    package = priced("stmt-commit", "2.00", count=1, gpu=1)
    now = timezone.now()
    start = now + timedelta(minutes=10)
    ledger.commit(
        reservation_uid=uuid.uuid4(),
        tenant_id=tenant.pk,
        name="nightly",
        package_id=package.id,
        region="default",
        slots=2,
        devices=1,
        start=start,
        end=start + timedelta(hours=1),
    )
    page = member_client.get(reverse("dashboard:statement-month", args=[f"{now:%Y-%m}"]))
    assert page.status_code == 200
    text = html.unescape(page.content.decode())
    assert "Committed by reservations" in text
    row = re.search(r'<tr data-reservation="nightly">(.*?)</tr>', text, re.S)
    assert row is not None
    if (start + timedelta(hours=1)).month == now.month:  # not cut at the month's end
        assert "4.00" in row.group(1)  # two slots, an hour, 2.00 each
