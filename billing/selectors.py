"""Reading the ledger: cost to date per unit and tenant, usage over a period grouped by unit,
package, day or tenant, and the records an export streams. Running meters count up to now
(their rows are not written until they close or an hour is sealed)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import Q, QuerySet, Sum

from billing import periods, prices
from billing.models import Grain, Meter, PackageRollup, QuantityUnit, UnitRollup, UsageRecord
from tenancy.models import Tenant

GROUPS = ("unit", "package", "day", "region", "tenant", "package-day")


@dataclass
class Totals:
    seconds: Decimal = Decimal(0)
    device_seconds: Decimal = Decimal(0)
    share_seconds: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)

    def add(self, *, unit: str, seconds: Decimal, quantity: Decimal, cost: Decimal) -> None:
        self.seconds += seconds
        if unit == QuantityUnit.SHARE_SECONDS:
            self.share_seconds += quantity
        else:
            self.device_seconds += quantity
        self.cost += cost


@dataclass
class Usage:
    start: datetime
    end: datetime
    group_by: str
    groups: dict[tuple, Totals] = field(default_factory=dict)

    @property
    def total(self) -> Totals:
        total = Totals()
        for totals in self.groups.values():
            total.seconds += totals.seconds
            total.device_seconds += totals.device_seconds
            total.share_seconds += totals.share_seconds
            total.cost += totals.cost
        return total


def _meter_pieces(
    meters: Iterable[Meter], *, until: datetime
) -> Iterator[tuple[Meter, periods.Piece]]:
    meters = list(meters)
    if not meters:
        return
    versions = prices.versions_for(m.package_id for m in meters)
    for meter in meters:
        chosen = prices.versions_of(versions, meter.package_id, meter.alternative)
        for piece in periods.priced_pieces(
            meter.started_at, until, count=meter.count, versions=chosen
        ):
            yield meter, piece


def running_cost(tenant: Tenant, *, start: datetime, end: datetime, now: datetime) -> Decimal:
    """What the tenant's running meters have cost in `[start, end)` up to `now`: the unsealed
    time that is not in the ledger's rows yet (costs_by_tenant counts it the same way)."""
    meters = Meter.objects.filter(tenant=tenant, started_at__lt=end)
    return sum(
        (
            piece.cost
            for _, piece in _meter_pieces(meters, until=min(now, end))
            if start <= piece.start < end
        ),
        Decimal(0),
    )


def cost_to_date(unit_uids: Iterable[uuid.UUID], *, now: datetime) -> dict[uuid.UUID, Decimal]:
    """What each unit has cost so far: its monthly rollups, and its running meter up to `now`
    (two statements, three while any is running)."""
    uids = list(unit_uids)
    if not uids:
        return {}
    costs: dict[uuid.UUID, Decimal] = defaultdict(Decimal)
    rows = (
        UnitRollup.objects.filter(unit_uid__in=uids, grain=Grain.MONTH)
        .values("unit_uid")
        .annotate(total=Sum("cost"))
        .order_by()
    )
    for row in rows:
        costs[row["unit_uid"]] += row["total"]
    for meter, piece in _meter_pieces(Meter.objects.filter(unit_uid__in=uids), until=now):
        costs[meter.unit_uid] += piece.cost
    return {uid: costs.get(uid, Decimal(0)) for uid in uids}


def costs_by_tenant(
    *, now: datetime, since: datetime, tenant: Tenant | None = None
) -> dict[int, tuple[Decimal, Decimal]]:
    """What each tenant's units (or one tenant's) have cost in all and since `since` (a UTC
    month's start), running meters up to now, by tenant pk; tenants without usage are left
    out. Read from the monthly rollups: two statements, three while any unit runs."""
    if since != periods.month_start(since):
        raise ValueError(f"{since.isoformat()} is not the start of a UTC month")
    rows = PackageRollup.objects.filter(grain=Grain.MONTH)
    meters = Meter.objects.all()
    if tenant is not None:
        rows, meters = rows.filter(tenant=tenant), meters.filter(tenant=tenant)
    costs: dict[int, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    for row in (
        rows.values("tenant_id")
        .annotate(
            total=Sum("cost"),
            recent=Sum("cost", filter=Q(period__gte=since.astimezone(UTC).date())),
        )
        .order_by()
    ):
        costs[row["tenant_id"]][0] += row["total"] or Decimal(0)
        costs[row["tenant_id"]][1] += row["recent"] or Decimal(0)
    for meter, piece in _meter_pieces(meters, until=now):
        costs[meter.tenant_id][0] += piece.cost
        if piece.start >= since:
            costs[meter.tenant_id][1] += piece.cost
    return {pk: (total, recent) for pk, (total, recent) in costs.items()}


def tenant_costs(tenant: Tenant, *, now: datetime, since: datetime) -> tuple[Decimal, Decimal]:
    """What the tenant's units have cost in all and since `since` (see costs_by_tenant)."""
    return costs_by_tenant(now=now, since=since, tenant=tenant).get(
        tenant.pk, (Decimal(0), Decimal(0))
    )


def _key(
    group_by: str,
    *,
    unit_uid: Any,
    unit_name: str,
    package_id: str,
    day: date,
    tenant: str,
    region: str,
) -> tuple:
    if group_by == "region":
        return (region,)
    if group_by == "unit":
        return (str(unit_uid), unit_name, package_id)
    if group_by == "package":
        return (package_id,)
    if group_by == "day":
        return (day,)
    if group_by == "package-day":  # for charts: a series per package
        return (package_id, day)
    return (tenant,)


# What each grouping reads from the rollups (beside quantity_unit).
_ROLLUP_FIELDS = {
    "unit": ("unit_uid", "unit_name", "package_id"),
    "package": ("package_id",),
    "day": ("period",),
    "region": ("region",),
    "package-day": ("package_id", "period"),
    "tenant": ("tenant_id",),
}


def _clip(piece_start: datetime, piece_end: datetime, start: datetime, end: datetime) -> Decimal:
    """The share of `[piece_start, piece_end)` inside `[start, end)`, 0 to 1."""
    inside = periods.seconds(max(piece_start, start), min(piece_end, end))
    whole = periods.seconds(piece_start, piece_end)
    return inside / whole if whole > 0 and inside > 0 else Decimal(0)


def _starting_in(spans: Iterable[periods.Span]) -> Q:
    return reduce(or_, (Q(start__gte=a, start__lt=b) for a, b in spans), Q(pk__in=[]))


def usage(
    *,
    start: datetime,
    end: datetime,
    group_by: str,
    now: datetime,
    tenant: Tenant | None = None,
) -> Usage:
    """Usage in `[start, end)` grouped by `group_by` (one of GROUPS), for one tenant or all.
    Whole days and months are read from the rollups (billing.periods.cover says which); rows
    at the period's edges, and running meters, count for the part inside it (pro rata). The
    same few statements however long the ledger."""
    result = Usage(start=start, end=end, group_by=group_by)
    plan = periods.cover(start, end, now=now, by_month=group_by not in ("day", "package-day"))
    scope = UnitRollup.objects if group_by == "unit" else PackageRollup.objects
    rollups = scope.filter(
        Q(grain=Grain.MONTH, period__in=[m.date() for m in plan.months])
        | Q(grain=Grain.DAY, period__in=[d.date() for d in plan.days])
    )
    rows = UsageRecord.objects.all()
    meters = Meter.objects.filter(started_at__lt=min(end, now))
    if tenant is not None:
        rollups, rows, meters = (
            rollups.filter(tenant=tenant),
            rows.filter(tenant=tenant),
            meters.filter(tenant=tenant),
        )
    slugs = dict(Tenant.objects.values_list("pk", "slug")) if group_by == "tenant" else {}

    def totals(key: tuple) -> Totals:
        return result.groups.setdefault(key, Totals())

    if plan.months or plan.days:
        for row in (
            rollups.values(*_ROLLUP_FIELDS[group_by], "quantity_unit")
            .annotate(
                seconds_sum=Sum("seconds"), quantity_sum=Sum("quantity"), cost_sum=Sum("cost")
            )
            .order_by()
        ):
            key = _key(
                group_by,
                unit_uid=row.get("unit_uid"),
                unit_name=row.get("unit_name", ""),
                package_id=row.get("package_id", ""),
                day=row.get("period"),
                tenant=slugs.get(row.get("tenant_id"), ""),
                region=row.get("region", ""),
            )
            totals(key).add(
                unit=row["quantity_unit"],
                seconds=row["seconds_sum"],
                quantity=row["quantity_sum"],
                cost=row["cost_sum"],
            )

    def add_part(owner: UsageRecord | Meter, item: UsageRecord | periods.Piece, sign: int) -> None:
        """The part of a row or a running meter's piece inside the period (`sign` 1), or,
        for a row a rollup counted whole, the part outside it taken off (`sign` -1)."""
        part = _clip(item.start, item.end, start, end)
        if sign < 0:
            part = 1 - part
        if not part:
            return
        key = _key(
            group_by,
            unit_uid=owner.unit_uid,
            unit_name=owner.unit_name,
            package_id=owner.package_id,
            day=item.start.astimezone(UTC).date(),
            tenant=slugs.get(owner.tenant_id, ""),
            region=owner.region,
        )
        cost = Decimal(item.cost)
        # What the rollup counted less the part outside: exactly the part inside, rounded
        # as a row read one by one is.
        cost_part = (
            (cost * part).quantize(periods.COST_PLACES)
            if sign > 0
            else cost - (cost * (1 - part)).quantize(periods.COST_PLACES)
        )
        totals(key).add(
            unit=owner.quantity_unit,
            seconds=sign * item.seconds * part,
            quantity=sign * item.quantity * part,
            cost=sign * cost_part,
        )

    if plan.add or plan.subtract:
        spans = [*plan.add, *plan.subtract]
        for record in rows.filter(_starting_in(spans)):
            inside_add = any(a <= record.start < b for a, b in plan.add)
            add_part(record, record, 1 if inside_add else -1)
    for meter, piece in _meter_pieces(meters, until=min(end, now)):
        add_part(meter, piece, 1)
    return result


def records_starting(start: datetime, end: datetime) -> QuerySet[UsageRecord]:
    """The ledger rows that start in `[start, end)`, oldest first, with their tenants: what an
    export of that period carries (each row in exactly one of two adjacent periods)."""
    return (
        UsageRecord.objects.filter(start__gte=start, start__lt=end)
        .select_related("tenant")
        .order_by("start", "id")
    )
