"""Monthly statements: a tenant's ledger rows that start in a UTC month, one line per unit,
package, alternative, price version and kind (usage or correction), with the quantity, the
unit price and the cost, read from the month's rollups (billing.rollups). Its total is the sum
of those rows to the micro-unit, so it equals the ledger and the FOCUS export of the same
month (which carries the same rows)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import Max, Min, Sum

from billing import budgets, periods, selectors
from billing.models import Grain, Meter, UnitRollup
from tenancy.models import Tenant


def month_of(text: str) -> datetime | None:
    """The start of the UTC month "YYYY-MM" names; None when it names none."""
    try:
        start = datetime.strptime(text, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        return None
    return start if 1 <= start.year <= 9998 else None


@dataclass(frozen=True)
class Line:
    unit_uid: str
    unit_name: str
    package_id: str
    alternative: str
    price_version_id: int | None
    hourly: Decimal
    quantity_unit: str
    correction: bool
    records: int
    start: datetime
    end: datetime
    seconds: Decimal
    quantity: Decimal
    cost: Decimal

    @property
    def hours(self) -> Decimal:
        return self.seconds / Decimal(3600)


@dataclass
class Statement:
    tenant: Tenant
    start: datetime
    end: datetime
    currency: str
    lines: list[Line] = field(default_factory=list)
    # Units still metered in the month: their unsealed time is not in the ledger yet; what
    # it has cost up to `now` is `running`.
    open_meters: int = 0
    running: Decimal = Decimal(0)
    now: datetime | None = None
    # What the tenant's reservations commit it to in the rest of the month (not billed yet:
    # a slot is billed while it holds devices).
    committed: list[budgets.Committed] = field(default_factory=list)

    @property
    def committed_total(self) -> Decimal:
        return sum((c.cost for c in self.committed), Decimal(0))

    @property
    def total(self) -> Decimal:
        return sum((line.cost for line in self.lines), Decimal(0))

    @property
    def total_so_far(self) -> Decimal:
        """The lines and the running time: the month's cost the overview shows."""
        return self.total + self.running

    @property
    def final(self) -> bool:
        return self.open_meters == 0


def statement(tenant: Tenant, start: datetime, *, now: datetime) -> Statement:
    """The tenant's statement for the month starting at `start` (two statements)."""
    end = periods.next_month(start)
    rows = (
        UnitRollup.objects.filter(tenant=tenant, grain=Grain.MONTH, period=start.date())
        .values(
            "unit_uid",
            "unit_name",
            "package_id",
            "alternative",
            "price_version_id",
            "hourly",
            "quantity_unit",
            "correction",
        )
        .annotate(
            records_sum=Sum("records"),
            first=Min("first_start"),
            last=Max("last_end"),
            seconds_sum=Sum("seconds"),
            quantity_sum=Sum("quantity"),
            cost_sum=Sum("cost"),
        )
        .order_by("unit_name", "unit_uid", "first", "correction")
    )
    lines = [
        Line(
            unit_uid=str(row["unit_uid"]),
            unit_name=row["unit_name"],
            package_id=row["package_id"],
            alternative=row["alternative"],
            price_version_id=row["price_version_id"],
            hourly=row["hourly"],
            quantity_unit=row["quantity_unit"],
            correction=row["correction"],
            records=row["records_sum"],
            start=row["first"],
            end=row["last"],
            seconds=row["seconds_sum"],
            quantity=row["quantity_sum"],
            cost=row["cost_sum"],
        )
        for row in rows
    ]
    open_meters = (
        Meter.objects.filter(tenant=tenant, started_at__lt=end).count() if now >= start else 0
    )
    running = (
        selectors.running_cost(tenant, start=start, end=end, now=now) if open_meters else Decimal(0)
    )
    return Statement(
        tenant=tenant,
        start=start,
        end=end,
        currency=settings.BILLING_CURRENCY,
        lines=lines,
        open_meters=open_meters,
        running=running,
        now=now,
        committed=budgets.commitments(tenant, now=max(now, start), until=end) if now < end else [],
    )


CSV_COLUMNS = (
    "month",
    "unit",
    "unitUid",
    "package",
    "alternative",
    "priceVersion",
    "kind",
    "from",
    "to",
    "seconds",
    "quantity",
    "quantityUnit",
    "unitPrice",
    "cost",
    "currency",
)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def line_json(line: Line, *, month: str, currency: str) -> dict[str, str]:
    return {
        "month": month,
        "unit": line.unit_name,
        "unitUid": line.unit_uid,
        "package": line.package_id,
        "alternative": line.alternative,
        "priceVersion": "" if line.price_version_id is None else str(line.price_version_id),
        "kind": "correction" if line.correction else "usage",
        "from": _stamp(line.start),
        "to": _stamp(line.end),
        "seconds": format(line.seconds, "f"),
        "quantity": format(line.quantity, "f"),
        "quantityUnit": line.quantity_unit,
        "unitPrice": format(line.hourly, "f"),
        "cost": periods.cost_text(line.cost),
        "currency": currency,
    }


def render_csv(found: Statement) -> Iterator[str]:
    """The statement as CSV: a header, a line per statement line, then the total."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    month = f"{found.start:%Y-%m}"
    for line in found.lines:
        writer.writerow(line_json(line, month=month, currency=found.currency))
    writer.writerow(
        {
            "month": month,
            "kind": "total",
            "cost": periods.cost_text(found.total),
            "currency": found.currency,
        }
    )
    yield buffer.getvalue()
