"""Budgets: a tenant's monthly spend against its budget, the alerts at 50, 80 and 100 %, the
forecast to the month's end, and in enforce mode orders and starts refused and running units
stopped once the grace has passed; in alert mode, only alerts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from billing.budgets import budget_of, check_budgets
from billing.models import BudgetAlert
from billing.tests.helpers import hold, priced
from catalog.tests.factories import ARTICLE_PACKAGE_ID
from runtime import actions
from runtime.models import GPUUnit, Operation, OperationKind, RunPolicy, UnitPhase
from runtime.tests.factories import UnitFactory
from tenancy import webhooks
from tenancy.models import BudgetMode, Tenant, WebhookDelivery
from tests.endpoints import client_for

pytestmark = pytest.mark.django_db

# The last two hours of December 2026: what runs now runs two more hours this month.
NOW = datetime(2026, 12, 31, 22, 0, tzinfo=UTC)
EARLIER = datetime(2026, 12, 31, 10, 0, tzinfo=UTC)


@pytest.fixture
def package():
    # Ten an hour (the article's RTX 3080 x2 package, priced since the year began).
    return priced(ARTICLE_PACKAGE_ID, "10.00", article=True)


def _budget(tenant: Tenant, limit: str, mode: str = BudgetMode.ALERT, grace: str = "1h") -> None:
    Tenant.objects.filter(pk=tenant.pk).update(
        monthly_budget=Decimal(limit), budget_mode=mode, budget_grace=grace
    )
    tenant.refresh_from_db()


def _ran(tenant: Tenant, package, name: str, hours: float, *, running: bool = False) -> GPUUnit:
    """A unit whose pod held its devices `hours` from EARLIER (and still does, `running`)."""
    unit = UnitFactory(
        tenant=tenant,
        name=name,
        package=package,
        phase=UnitPhase.RUNNING if running else UnitPhase.STOPPED,
        run_policy=RunPolicy.RUNNING if running else RunPolicy.STOPPED,
        unit_k8s_uid=f"k8s-{name}",
        observed_generation=1,
    )
    hold(unit, EARLIER, None if running else EARLIER + timedelta(hours=hours))
    return unit


def _order(tenant: Tenant, name: str):
    body = {"operationID": f"o-{name}", "name": name, "packageID": ARTICLE_PACKAGE_ID}
    return client_for(tenant).post("/api/v1/gpu-units", {**body, "image": "busybox"}, format="json")


@time_machine.travel(NOW, tick=False)
def test_the_budget_shows_spend_forecast_and_alerts_as_thresholds_are_crossed(tenant, package):
    _budget(tenant, "100.00")
    _ran(tenant, package, "done", 5.5)  # 55.00
    check_budgets(now=NOW)
    assert [a.threshold for a in BudgetAlert.objects.filter(tenant=tenant)] == [50]

    _ran(tenant, package, "more", 3)  # 85.00 in all
    check_budgets(now=NOW)
    check_budgets(now=NOW)  # each threshold alerts once a month
    assert [a.threshold for a in BudgetAlert.objects.filter(tenant=tenant)] == [50, 80]

    _ran(tenant, package, "live", 0, running=True)  # 12 h so far: 205.00, two more hours
    body = client_for(tenant).get("/api/v1/budget").json()["data"]
    assert body["month"] == "2026-12"
    assert body["limit"] == "100.00"
    assert body["mode"] == "alert"
    assert Decimal(body["spent"]) == Decimal("205.00")
    assert Decimal(body["forecast"]) == Decimal("225.00")
    assert body["percent"] == "205.0"
    assert [a["threshold"] for a in body["alerts"]] == [50, 80]

    # Alert mode: 100 % alerts, and nothing is refused or stopped.
    assert check_budgets(now=NOW) == []
    assert [a.threshold for a in BudgetAlert.objects.filter(tenant=tenant)] == [50, 80, 100]
    tenant.refresh_from_db()
    assert tenant.budget_exceeded_at is None
    assert _order(tenant, "allowed").status_code == 201
    assert actions.enforce_budgets() == 0


@time_machine.travel(NOW, tick=False)
def test_an_enforced_budget_refuses_orders_and_starts_then_stops_units_after_the_grace(
    tenant, package
):
    _budget(tenant, "100.00", mode=BudgetMode.ENFORCE, grace="1h")
    live = _ran(tenant, package, "live", 0, running=True)  # 12 h at 10: 120.00
    stopped = _ran(tenant, package, "parked", 0.5)

    # Within the grace: units are told when they stop, nothing is stopped yet.
    assert actions.enforce_budgets() == 0
    tenant.refresh_from_db()
    assert tenant.budget_exceeded_at is not None
    stops_at = budget_of(tenant, now=NOW).stops_at
    assert stops_at == tenant.budget_exceeded_at + timedelta(hours=1)
    assert "stops at" in live.events.get(reason="BudgetExceeded").message
    body = client_for(tenant).get("/api/v1/budget").json()["data"]
    assert body["stopsAt"] is not None

    refused = _order(tenant, "refused")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert not GPUUnit.objects.filter(name="refused").exists()
    start = client_for(tenant).post(
        f"/api/v1/gpu-units/{stopped.name}/start", {"operationID": "s-1"}, format="json"
    )
    assert start.status_code == 409
    assert start.json()["error"]["code"] == "budget_exceeded"

    # After the grace, the running unit is stopped (once).
    with time_machine.travel(stops_at + timedelta(seconds=1), tick=False):
        assert actions.enforce_budgets() == 1
        assert actions.enforce_budgets() == 0
    live.refresh_from_db()
    assert live.phase == UnitPhase.STOPPING
    assert live.reason == "BudgetExceeded"
    assert Operation.objects.filter(unit=live, kind=OperationKind.STOP).count() == 1

    # Raised, the budget lets the tenant order again.
    _budget(tenant, "1000.00", mode=BudgetMode.ENFORCE)
    check_budgets(now=NOW)
    tenant.refresh_from_db()
    assert tenant.budget_exceeded_at is None
    assert _order(tenant, "again").status_code == 201


@time_machine.travel(NOW, tick=False)
def test_each_threshold_reached_is_one_webhook_event(tenant, package, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    hook = webhooks.create_endpoint(
        tenant=tenant, url="http://127.0.0.1:9/hook", events=["budget.threshold_reached"]
    )
    webhooks.create_endpoint(
        tenant=tenant, url="http://127.0.0.1:9/other", events=["unit.phase_changed"]
    )
    _budget(tenant, "100.00")
    _ran(tenant, package, "done", 8.5)  # 85.00: 50 and 80 at once
    check_budgets(now=NOW)
    check_budgets(now=NOW)  # nothing new: nothing sent again
    sent = WebhookDelivery.objects.order_by("id")
    assert [(d.endpoint_id, d.payload["data"]["threshold"]) for d in sent] == [
        (hook.pk, 50),
        (hook.pk, 80),
    ]
    event = sent[1].payload
    assert event["type"] == "io.lokiwager.gpu.budget.threshold_reached"
    assert event["subject"] == "budget"
    assert (event["data"]["spent"], event["data"]["limit"], event["data"]["currency"]) == (
        "85.00",
        "100.00",
        "USD",
    )
    assert event["data"]["month"] == "2026-12-01"
