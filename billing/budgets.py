"""Budgets: what a tenant may spend in a UTC month (Tenant.monthly_budget). What the month has
cost so far (the ledger and running meters, billing.selectors), what it will cost by its end if
what runs now keeps running, the alerts at 50, 80 and 100 % (BudgetAlert, once each per
month), and in enforce mode the moment the budget was spent (Tenant.budget_exceeded_at): from
then orders and starts are refused, and the runtime stops running units once the tenant's grace
has passed (runtime.actions.enforce_budgets, beat)."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Q

from billing import periods, prices, selectors
from billing.models import BudgetAlert, Commitment, Meter
from controlplane.validation import parse_duration
from tenancy import webhooks
from tenancy.errors import BudgetExceeded
from tenancy.models import BudgetMode, Tenant

logger = logging.getLogger(__name__)

THRESHOLDS = (50, 80, 100)


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """The UTC month `now` falls in, [start, end)."""
    return periods.month_start(now), periods.next_month(now)


@dataclass(frozen=True)
class Budget:
    """A tenant's budget for the month of `now` and where it stands."""

    tenant: Tenant
    limit: Decimal | None
    currency: str
    mode: str
    start: datetime
    end: datetime
    spent: Decimal
    forecast: Decimal
    # What the tenant's reservations commit it to for the rest of the month.
    committed: Decimal = Decimal(0)
    alerts: list[BudgetAlert] = field(default_factory=list)

    @property
    def percent(self) -> Decimal | None:
        if not self.limit:
            return None
        return (self.spent * 100 / self.limit).quantize(Decimal("0.1"))

    @property
    def reached(self) -> Decimal:
        """What the alerts count: the month's spend and what its reservations commit it to
        (a reservation past 80 % of the budget warns when it is made, not when it is billed).
        Enforcement counts the spend alone: running units are never stopped for a charge
        still to come."""
        return self.spent + self.committed

    @property
    def exceeded(self) -> bool:
        return self.limit is not None and self.spent >= self.limit

    @property
    def exceeded_at(self) -> datetime | None:
        return self.tenant.budget_exceeded_at if self.mode == BudgetMode.ENFORCE else None

    @property
    def grace(self) -> timedelta:
        seconds, _problem = parse_duration(self.tenant.budget_grace)
        return timedelta(seconds=seconds or 0)

    @property
    def stops_at(self) -> datetime | None:
        """When running units are stopped (enforce mode, budget spent)."""
        return self.exceeded_at + self.grace if self.exceeded_at else None


def _hourly_now(
    versions: prices.Versions, package_id: str, alternative: str, now: datetime
) -> Decimal:
    version = periods.in_force(prices.versions_of(versions, package_id, alternative), now)
    return Decimal(version.hourly) if version is not None else Decimal(0)


def _hours(start: datetime, end: datetime) -> Decimal:
    return max(Decimal((end - start).total_seconds()) / Decimal(3600), Decimal(0))


def _slots_cost(slots: int, hourly: Decimal, start: datetime, end: datetime) -> Decimal:
    """`slots` reserved slots held from `start` to `end` at `hourly` each, to the micro-unit."""
    return (slots * hourly * _hours(start, end)).quantize(periods.COST_PLACES)


@dataclass(frozen=True)
class Committed:
    """A reservation's commitment from a moment on: its cost at most, to `end`."""

    commitment: Commitment
    start: datetime
    end: datetime
    cost: Decimal


def commitments(tenant: Tenant, *, now: datetime, until: datetime | None = None) -> list[Committed]:
    """What each of the tenant's reservations commits it to from `now` (to `until`, when
    given): every slot for the rest of its window at the package's price in force now, the
    most it can still cost (a slot is billed only while it holds devices). Two statements."""
    found = list(Commitment.objects.filter(tenant=tenant, end__gt=now).order_by("start", "name"))
    if until is not None:
        found = [c for c in found if c.start < until]
    if not found:
        return []
    versions = prices.versions_for(c.package_id for c in found)
    out = []
    for commitment in found:
        start = max(now, commitment.start)
        end = commitment.end if until is None else min(commitment.end, until)
        hourly = _hourly_now(versions, commitment.package_id, "", now)
        cost = _slots_cost(commitment.slots, hourly, start, end)
        out.append(Committed(commitment=commitment, start=start, end=end, cost=cost))
    return out


def committed(tenant: Tenant, *, now: datetime, until: datetime | None = None) -> Decimal:
    """The sum of `commitments`."""
    return sum((c.cost for c in commitments(tenant, now=now, until=until)), Decimal(0))


def forecast_of(
    tenant: Tenant, *, spent: Decimal, now: datetime, end: datetime, committed: Decimal
) -> Decimal:
    """The month's spend if every unit running now keeps running to the month's end at the
    price in force now, and every reservation holds all its slots to its end (`committed`,
    to the month's end): a meter on a reservation (a unit on a slot, a placeholder) counts
    only past the reservation's end, where the commitment does not cover it (one statement
    for the meters, one for their prices)."""
    meters = list(Meter.objects.filter(tenant=tenant))
    forecast = spent + committed
    if not meters:
        return forecast.quantize(periods.COST_PLACES)
    versions = prices.versions_for(meter.package_id for meter in meters)
    for meter in meters:
        since = max(now, meter.reservation_end) if meter.reservation_end else now
        if meter.placeholder:
            continue  # a placeholder holds nothing past its reservation's end
        hourly = _hourly_now(versions, meter.package_id, meter.alternative, now)
        forecast += hourly * _hours(min(since, end), end)
    return forecast.quantize(periods.COST_PLACES)


def commitment_problem(
    tenant: Tenant, *, package_id: str, slots: int, start: datetime, end: datetime, now: datetime
) -> BudgetExceeded | None:
    """Why an enforced budget refuses a new reservation (called under the tenant lock), or
    None: its commitment in this month, with the month's spend and what the tenant's other
    reservations commit it to, would pass the limit. An alert budget takes it (its alerts
    count the commitment)."""
    limit = tenant.monthly_budget
    if limit is None or tenant.budget_mode != BudgetMode.ENFORCE:
        return None
    month_start, month_end = month_bounds(now)
    _total, spent = selectors.tenant_costs(tenant, now=now, since=month_start)
    versions = prices.versions_for([package_id])
    hourly = _hourly_now(versions, package_id, "", now)
    new = _slots_cost(slots, hourly, max(now, start), min(end, month_end))
    already = committed(tenant, now=now, until=month_end)
    if spent + already + new <= limit:
        return None
    return BudgetExceeded(
        f"The reservation commits {_cents(new)} {settings.BILLING_CURRENCY} this month; with "
        f"{_cents(spent)} spent and {_cents(already)} committed by other reservations it would "
        f"pass the monthly budget of {limit}: raise the budget, or reserve fewer slots or a "
        "shorter window.",
        details={
            "limit": str(_cents(limit)),
            "spent": str(_cents(spent)),
            "committed": str(_cents(already)),
            "requested": str(_cents(new)),
        },
    )


def budget_of(tenant: Tenant, *, now: datetime, spent: Decimal | None = None) -> Budget:
    """Where the tenant's budget stands this month (`spent`: the month's cost, when the
    caller has it already)."""
    start, end = month_bounds(now)
    if spent is None:
        _total, spent = selectors.tenant_costs(tenant, now=now, since=start)
    to_come = committed(tenant, now=now, until=end)
    return Budget(
        tenant=tenant,
        limit=tenant.monthly_budget,
        currency=settings.BILLING_CURRENCY,
        mode=tenant.budget_mode,
        start=start,
        end=end,
        spent=spent,
        forecast=forecast_of(tenant, spent=spent, now=now, end=end, committed=to_come),
        committed=to_come,
        alerts=list(BudgetAlert.objects.filter(tenant=tenant, month=start.date())),
    )


def _cents(amount: Decimal | None) -> Decimal | None:
    """As GET /budget shows an amount: to the cent."""
    return None if amount is None else amount.quantize(Decimal("0.01"))


def _announce(alert: BudgetAlert, budget: Budget) -> None:
    """Tell the tenant's webhooks; the event's id is the alert's own (tenant, month,
    threshold), so a pass that raced another sends the same webhook-id twice at most."""
    webhooks.emit(
        alert.tenant_id,
        "budget.threshold_reached",
        subject="budget",
        data={
            "month": alert.month.isoformat(),
            "threshold": alert.threshold,
            "limit": str(_cents(budget.limit)),
            "spent": str(_cents(budget.spent)),
            "committed": str(_cents(budget.committed)),
            "forecast": str(_cents(budget.forecast)),
            "currency": budget.currency,
            "mode": budget.mode,
        },
        event_id=uuid.uuid5(
            uuid.NAMESPACE_URL, f"budget/{alert.tenant_id}/{alert.month}/{alert.threshold}"
        ),
        time=alert.at,
    )


def check_budgets(*, now: datetime) -> list[Budget]:
    """Beat's pass over the tenants with a budget (or a spent one to clear): record the
    alerts newly reached, mark or clear the moment an enforced budget was spent. Returns the
    enforced budgets that are spent (the runtime stops their units after the grace)."""
    spent_budgets = []
    tenants = Tenant.objects.filter(
        Q(monthly_budget__isnull=False) | Q(budget_exceeded_at__isnull=False)
    )
    for tenant in tenants:
        budget = budget_of(tenant, now=now)
        if budget.limit is not None:
            reached = [t for t in THRESHOLDS if budget.reached * 100 >= budget.limit * t]
            known = {alert.threshold for alert in budget.alerts}
            new = [
                BudgetAlert(
                    tenant=tenant,
                    month=budget.start.date(),
                    threshold=threshold,
                    budget=budget.limit,
                    spent=budget.spent,
                    at=now,
                )
                for threshold in reached
                if threshold not in known
            ]
            if new:
                BudgetAlert.objects.bulk_create(new, ignore_conflicts=True)
                for alert in new:
                    _announce(alert, budget)
                logger.info(
                    "tenant %s reached %s %% of its budget (%s of %s %s)",
                    tenant.slug,
                    max(alert.threshold for alert in new),
                    budget.spent,
                    budget.limit,
                    budget.currency,
                )
        enforced = budget.mode == BudgetMode.ENFORCE and budget.exceeded
        if enforced and tenant.budget_exceeded_at is None:
            Tenant.objects.filter(pk=tenant.pk).update(budget_exceeded_at=now)
            tenant.budget_exceeded_at = now
        elif not enforced and tenant.budget_exceeded_at is not None:
            Tenant.objects.filter(pk=tenant.pk).update(budget_exceeded_at=None)
            tenant.budget_exceeded_at = None
        if enforced:
            # With its alerts as now recorded (the spend is the same: not read again).
            spent_budgets.append(budget_of(tenant, now=now, spent=budget.spent))
    return spent_budgets
