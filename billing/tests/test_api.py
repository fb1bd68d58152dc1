"""GET /usage, /operator/usage and its export, costToDate on units and /quota, prices on
/packages: over ledger rows written by billing.ledger at known times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from billing import periods
from billing.tests.helpers import hold, priced
from catalog.tests.factories import PackageFactory
from runtime.models import UnitPhase
from runtime.tests.factories import UnitFactory
from tenancy.tests.factories import TenantFactory
from tests.endpoints import EndpointTest, client_for

pytestmark = pytest.mark.django_db

T = datetime(2026, 11, 28, 10, 30, tzinfo=UTC)


@pytest.fixture
def package():
    return priced("h100-2x", "3.60", gpu=2, count=2)


@pytest.fixture
def used(tenant, package):
    """The tenant's unit ran 90 minutes from 10:30 (two rows: 10:30-11:00, 11:00-12:00)."""
    unit = UnitFactory(tenant=tenant, name="trainer", package=package, claim_k8s_uid="c-1")
    hold(unit, T, T + timedelta(minutes=90))
    other = UnitFactory(tenant=TenantFactory(), name="elsewhere", package=package)
    hold(other, T, T + timedelta(hours=3))
    return unit


class TestUsage(EndpointTest):
    path = "/api/v1/usage"

    def test_grouped_by_unit_package_and_day(self, auth_client, used):
        query = {"from": "2026-11-28", "to": "2026-11-29T00:00:00Z"}
        by_unit = self.get_success_response(auth_client, query={**query, "groupBy": "unit"}).json()[
            "data"
        ]
        assert by_unit["currency"] == "USD"
        assert by_unit["items"] == [
            {
                "unitUid": str(used.uid),
                "unit": "trainer",
                "package": "h100-2x",
                "seconds": "5400.000",
                "deviceSeconds": "10800.000",
                "shareSeconds": "0.000",
                "cost": "5.400000",
            }
        ]
        by_package = self.get_success_response(auth_client, query=query).json()["data"]
        assert by_package["groupBy"] == "package"
        assert [i["package"] for i in by_package["items"]] == ["h100-2x"]
        assert by_package["total"]["cost"] == "5.400000"  # the other tenant's is not here
        by_day = self.get_success_response(auth_client, query={**query, "groupBy": "day"})
        assert by_day.json()["data"]["items"][0]["day"] == "2026-11-28"

    def test_grouped_by_region_whole_days_and_edges_alike(self, auth_client, tenant, package):
        east = UnitFactory(tenant=tenant, name="east", package=package, region="us-east")
        west = UnitFactory(tenant=tenant, name="west", package=package, region="eu-west")
        hold(east, T, T + timedelta(hours=2))  # 3.60 an hour: 7.20
        hold(west, T, T + timedelta(minutes=30))  # 1.80
        whole = {"from": "2026-11-28", "to": "2026-11-29", "groupBy": "region"}
        data = self.get_success_response(auth_client, query=whole).json()["data"]
        assert data["groupBy"] == "region"
        assert [(i["region"], i["cost"]) for i in data["items"]] == [
            ("eu-west", "1.800000"),
            ("us-east", "7.200000"),
        ]
        # A period cutting rows (read from the rows, not the rollups) groups the same way.
        cut = {"from": "2026-11-28T10:45:00Z", "to": "2026-11-28T11:45:00Z", "groupBy": "region"}
        data = self.get_success_response(auth_client, query=cut).json()["data"]
        assert [(i["region"], i["seconds"]) for i in data["items"]] == [
            ("eu-west", "900.000"),
            ("us-east", "3600.000"),
        ]
        # By package, the regions add up: one line.
        by_package = self.get_success_response(
            auth_client, query={**whole, "groupBy": "package"}
        ).json()["data"]
        assert [(i["package"], i["cost"]) for i in by_package["items"]] == [("h100-2x", "9.000000")]

    def test_a_period_cutting_a_row_counts_the_part_inside(self, auth_client, used):
        data = self.get_success_response(
            auth_client, query={"from": "2026-11-28T10:45:00Z", "to": "2026-11-28T11:30:00+00:00"}
        ).json()["data"]
        assert data["total"]["seconds"] == "2700.000"
        assert data["total"]["cost"] == "2.700000"

    def test_a_running_unit_counts_up_to_now(self, auth_client, tenant, package, monkeypatch):
        # Mid-month (the default period is this UTC month), and the clock stands still.
        now = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
        monkeypatch.setattr(timezone, "now", lambda: now)
        unit = UnitFactory(tenant=tenant, name="live", package=package, phase=UnitPhase.RUNNING)
        hold(unit, now - timedelta(seconds=600), None)
        data = self.get_success_response(auth_client).json()["data"]
        assert data["total"]["seconds"] == "600.000"
        assert data["from"].startswith("2026-11-01T00:00:00")

    @pytest.mark.parametrize(
        ("query", "field"),
        [
            ({"groupBy": "tenant"}, "groupBy"),
            ({"from": "2026-11-29", "to": "2026-11-28"}, "to"),
            ({"from": "2026-11-28T10:00:00"}, "from"),  # no offset: which 10:00?
            ({"from": "yesterday"}, "from"),
            # Outside what a datetime holds once moved to UTC (a 500 before).
            ({"from": "0001-01-01T00:00:00+14:00"}, "from"),
            ({"to": "9999-12-31T23:00:00-05:00"}, "to"),
            ({"from": "0001-01-01"}, "from"),
            ({"to": "9999-12-31"}, "to"),
            ({"from": "2025-01-01", "to": "2026-11-28"}, "to"),  # over 400 days
            ({"unit": "trainer"}, "unit"),
        ],
    )
    def test_bad_queries_are_400_naming_the_parameter(self, auth_client, query, field):
        error = self.get_error_response(
            auth_client, status=400, code="invalid_request", query=query
        )
        assert field in error["details"]["fields"], error

    def test_statements_are_the_baseline(self, auth_client, used):
        auth_client.get("/api/v1/quota")
        self.assert_statement_count(auth_client, query={"groupBy": "unit"})


class TestOperatorUsage(EndpointTest):
    path = "/api/v1/operator/usage"

    def test_tenant_keys_are_refused(self, auth_client):
        self.get_error_response(auth_client, status=403, code="forbidden")

    def test_every_tenant_by_tenant(self, tenant, used):
        operator = client_for(TenantFactory(is_operator=True))
        data = self.get_success_response(
            operator, query={"from": "2026-11-28", "to": "2026-11-29"}
        ).json()["data"]
        costs = {item["tenant"]: item["cost"] for item in data["items"]}
        assert costs[tenant.slug] == "5.400000"
        assert sorted(costs.values()) == ["10.800000", "5.400000"]

    def test_statements_are_the_baseline(self, used):
        operator = client_for(TenantFactory(is_operator=True))
        operator.get("/api/v1/quota")
        self.assert_statement_count(operator, query={"from": "2026-11-28"})


def test_units_and_quota_carry_their_cost_to_date(auth_client, tenant, used, package, monkeypatch):
    # The clock stands still, mid-month in the month after `used`'s: this month's cost is the
    # live unit's whole hour, not the sliver of it after a month's start the request fell on.
    now = datetime(2026, 12, 15, 12, 0, tzinfo=UTC)
    monkeypatch.setattr(timezone, "now", lambda: now)
    live = UnitFactory(tenant=tenant, name="live", package=package, phase=UnitPhase.RUNNING)
    hold(live, now - timedelta(hours=1), None)
    units = {u["name"]: u for u in auth_client.get("/api/v1/gpu-units").json()["data"]}
    assert units["trainer"]["costToDate"] == "5.400000"
    assert 3.6 <= float(units["live"]["costToDate"]) < 3.61
    assert auth_client.get("/api/v1/gpu-units/trainer").json()["data"]["costToDate"] == "5.400000"
    quota = auth_client.get("/api/v1/quota").json()["data"]
    assert quota["currency"] == "USD"
    assert 9.0 <= float(quota["costToDate"]) < 9.01
    assert 0 < float(quota["costThisMonth"]) <= float(quota["costToDate"])


def test_packages_carry_their_prices(auth_client):
    PackageFactory(
        id="h100-else-l40s",
        price="2.49",
        alternatives=[{"name": "l40s", "deviceClassName": "nvidia-l40s", "count": 1}],
        alternative_prices={"l40s": "1.19"},
    )
    body = auth_client.get("/api/v1/packages/h100-else-l40s").json()["data"]
    assert body["price"] == {"hourly": "2.49", "currency": "USD", "alternatives": {"l40s": "1.19"}}


class TestBudget(EndpointTest):
    path = "/api/v1/budget"

    def test_statements_are_the_baseline(self, auth_client, tenant, used):
        auth_client.get("/api/v1/quota")  # the key's first use of the minute stamps it
        self.assert_statement_count(auth_client)

    def test_a_tenant_without_a_budget_sees_its_spend_and_no_limit(self, auth_client, used):
        data = self.get_success_response(auth_client).json()["data"]
        assert data["limit"] is None
        assert data["percent"] is None
        assert data["mode"] == "alert"
        assert data["alerts"] == []
        assert data["stopsAt"] is None


class TestStatement(EndpointTest):
    path = "/api/v1/usage/statements/{month}"

    def test_statements_are_the_baseline(self, auth_client, tenant, used):
        auth_client.get("/api/v1/quota")
        self.assert_statement_count(auth_client, month="2026-11")


def test_the_default_period_reads_this_month_from_its_rollup(auth_client, used, monkeypatch):
    # The period ends at the request's one "now": its month is read whole from the rollups,
    # not today's rows one by one (bench.ledger found the endpoint 11x slower at 1M rows).
    # The clock stands still, so that the month asserted is the request's (not the next one,
    # when a month ends between the request and the assertion).
    now = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    monkeypatch.setattr(timezone, "now", lambda: now)
    plans = []
    real = periods.cover

    def cover(*args, **kwargs):
        plans.append(real(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(periods, "cover", cover)
    response = auth_client.get("/api/v1/usage", {"groupBy": "unit"})
    assert response.status_code == 200
    (plan,) = plans
    assert plan.months == (periods.month_start(now),)
    assert plan.add == ()
