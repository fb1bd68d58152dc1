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
from typing import Any

from django.db.models import Q, QuerySet, Sum
from django.db.models.functions import TruncDate

from billing import periods, prices
from billing.models import Meter, QuantityUnit, UsageRecord
from tenancy.models import Tenant

GROUPS = ("unit", "package", "day", "tenant", "package-day")


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


def cost_to_date(unit_uids: Iterable[uuid.UUID], *, now: datetime) -> dict[uuid.UUID, Decimal]:
    """What each unit has cost so far: its ledger rows, and its running meter up to `now`
    (two statements, three while any is running)."""
    uids = list(unit_uids)
    if not uids:
        return {}
    costs: dict[uuid.UUID, Decimal] = defaultdict(Decimal)
    rows = (
        UsageRecord.objects.filter(unit_uid__in=uids)
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
    hour, e.g. the month's start: no row straddles it), running meters up to now, by tenant
    pk; tenants without usage are left out. Two statements, three while any unit runs."""
    rows = (
        UsageRecord.objects.all() if tenant is None else UsageRecord.objects.filter(tenant=tenant)
    )
    meters = Meter.objects.all() if tenant is None else Meter.objects.filter(tenant=tenant)
    costs: dict[int, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    for row in (
        rows.values("tenant_id")
        .annotate(total=Sum("cost"), recent=Sum("cost", filter=Q(start__gte=since)))
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
    group_by: str, *, unit_uid: Any, unit_name: str, package_id: str, day: date, tenant: str
) -> tuple:
    if group_by == "unit":
        return (str(unit_uid), unit_name, package_id)
    if group_by == "package":
        return (package_id,)
    if group_by == "day":
        return (day,)
    if group_by == "package-day":  # for charts: a series per package
        return (package_id, day)
    return (tenant,)


def _clip(piece_start: datetime, piece_end: datetime, start: datetime, end: datetime) -> Decimal:
    """The share of `[piece_start, piece_end)` inside `[start, end)`, 0 to 1."""
    inside = periods.seconds(max(piece_start, start), min(piece_end, end))
    whole = periods.seconds(piece_start, piece_end)
    return inside / whole if whole > 0 and inside > 0 else Decimal(0)


def usage(
    *,
    start: datetime,
    end: datetime,
    group_by: str,
    now: datetime,
    tenant: Tenant | None = None,
) -> Usage:
    """Usage in `[start, end)` grouped by `group_by` (one of GROUPS), for one tenant or all.
    Rows wholly inside are summed by the database; a row the period cuts, and running meters,
    count for the part inside it (pro rata)."""
    result = Usage(start=start, end=end, group_by=group_by)
    rows = (
        UsageRecord.objects.all() if tenant is None else UsageRecord.objects.filter(tenant=tenant)
    )
    slugs = dict(Tenant.objects.values_list("pk", "slug")) if group_by == "tenant" else {}

    def totals(key: tuple) -> Totals:
        return result.groups.setdefault(key, Totals())

    inside = rows.filter(start__gte=start, end__lte=end)
    for row in (
        inside.annotate(day=TruncDate("start", tzinfo=UTC))
        .values("unit_uid", "unit_name", "package_id", "day", "tenant_id", "quantity_unit")
        .annotate(seconds_sum=Sum("seconds"), quantity_sum=Sum("quantity"), cost_sum=Sum("cost"))
        .order_by()
    ):
        key = _key(
            group_by,
            unit_uid=row["unit_uid"],
            unit_name=row["unit_name"],
            package_id=row["package_id"],
            day=row["day"],
            tenant=slugs.get(row["tenant_id"], ""),
        )
        totals(key).add(
            unit=row["quantity_unit"],
            seconds=row["seconds_sum"],
            quantity=row["quantity_sum"],
            cost=row["cost_sum"],
        )

    def add_part(owner: UsageRecord | Meter, item: UsageRecord | periods.Piece) -> None:
        """The part of a row the period cuts, or of a running meter's piece, inside it."""
        part = _clip(item.start, item.end, start, end)
        if not part:
            return
        key = _key(
            group_by,
            unit_uid=owner.unit_uid,
            unit_name=owner.unit_name,
            package_id=owner.package_id,
            day=item.start.astimezone(UTC).date(),
            tenant=slugs.get(owner.tenant_id, ""),
        )
        totals(key).add(
            unit=owner.quantity_unit,
            seconds=item.seconds * part,
            quantity=item.quantity * part,
            cost=(item.cost * part).quantize(periods.COST_PLACES),
        )

    cut = rows.filter(start__lt=end, end__gt=start).filter(Q(start__lt=start) | Q(end__gt=end))
    for record in cut:
        add_part(record, record)
    meters = Meter.objects.filter(started_at__lt=min(end, now))
    if tenant is not None:
        meters = meters.filter(tenant=tenant)
    for meter, piece in _meter_pieces(meters, until=min(end, now)):
        add_part(meter, piece)
    return result


def records_starting(start: datetime, end: datetime) -> QuerySet[UsageRecord]:
    """The ledger rows that start in `[start, end)`, oldest first, with their tenants: what an
    export of that period carries (each row in exactly one of two adjacent periods)."""
    return (
        UsageRecord.objects.filter(start__gte=start, start__lt=end)
        .select_related("tenant")
        .order_by("start", "id")
    )
