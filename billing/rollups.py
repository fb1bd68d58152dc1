"""Ledger rollups: the sums of the rows that start in each UTC day and month, per unit (with
what a statement line tells apart) and per tenant and package, kept in the same transaction
as the rows are written, so readers (billing.selectors, billing.statements) cost a row per
group and period however long the ledger grows.

`add` is called by every writer of ledger rows (billing.ledger); `rebuild` recomputes them
from the ledger (the migration's backfill, and the bench); `differences` compares the two
(`manage.py audit_usage`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import (
    BooleanField,
    Count,
    ExpressionWrapper,
    Max,
    Min,
    Model,
    Q,
    QuerySet,
    Sum,
)
from django.db.models.functions import Trunc

from billing.models import (
    PACKAGE_ROLLUP_KEY,
    UNIT_ROLLUP_KEY,
    Grain,
    PackageRollup,
    UnitRollup,
    UsageRecord,
)

# The models' keys, by attribute (the tenant's id, as rows are built and read here).
UNIT_KEY = tuple("tenant_id" if name == "tenant" else name for name in UNIT_ROLLUP_KEY)
PACKAGE_KEY = tuple("tenant_id" if name == "tenant" else name for name in PACKAGE_ROLLUP_KEY)
SUMS = ("records", "seconds", "quantity", "cost")
ENDS = ("first_start", "last_end")


def period_of(moment: datetime, grain: str) -> date:
    """The first day of the UTC day or month `moment` falls in."""
    day = moment.astimezone(UTC).date()
    return day.replace(day=1) if grain == Grain.MONTH else day


@dataclass
class Delta:
    records: int = 0
    seconds: Decimal = Decimal(0)
    quantity: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    first_start: datetime | None = None
    last_end: datetime | None = None

    def add(self, record: UsageRecord) -> None:
        self.records += 1
        self.seconds += Decimal(record.seconds)
        self.quantity += Decimal(record.quantity)
        self.cost += Decimal(record.cost)
        if self.first_start is None or record.start < self.first_start:
            self.first_start = record.start
        if self.last_end is None or record.end > self.last_end:
            self.last_end = record.end


def _unit_key(record: UsageRecord, grain: str) -> tuple:
    return (
        grain,
        period_of(record.start, grain),
        record.tenant_id,
        uuid.UUID(str(record.unit_uid)),  # as the database gives it back
        record.unit_name,
        record.package_id,
        record.alternative,
        record.price_version_id,
        Decimal(record.hourly),
        record.currency,
        record.quantity_unit,
        record.corrects_id is not None,
    )


def _package_key(record: UsageRecord, grain: str) -> tuple:
    return (
        grain,
        period_of(record.start, grain),
        record.tenant_id,
        record.package_id,
        record.region,
        record.quantity_unit,
    )


def _order(key: tuple) -> tuple:
    """A total order of keys (None first), the same in every process: writers insert and
    lock rollup rows in it, so two of them never wait on each other in a cycle."""
    return tuple((value is not None, str(value)) for value in key)


def _add_to(
    model: type[Model], names: Sequence[str], coarse: Sequence[str], deltas: dict[tuple, Delta]
) -> None:
    """Add `deltas` to their rollup rows: make sure each row exists, lock them all (in pk
    order), then write the sums in one upsert. Three statements, each linear in the rows."""
    keys = sorted(deltas, key=_order)
    manager = model.objects  # type: ignore[attr-defined]
    manager.bulk_create(
        [model(**dict(zip(names, key, strict=True))) for key in keys], ignore_conflicts=True
    )
    # A filter wide enough for every key (a few more rows locked is harmless; one OR per key
    # would cost the planner more than the rows).
    wide = {f"{name}__in": {key[names.index(name)] for key in keys} for name in coarse}
    locked = {
        tuple(getattr(row, name) for name in names): row
        for row in manager.select_for_update().filter(**wide).order_by("pk")
    }
    rows = []
    for key in keys:
        row, delta = locked[key], deltas[key]
        row.records += delta.records
        row.seconds += delta.seconds
        row.quantity += delta.quantity
        row.cost += delta.cost
        if delta.first_start and (row.first_start is None or delta.first_start < row.first_start):
            row.first_start = delta.first_start
        if delta.last_end and (row.last_end is None or delta.last_end > row.last_end):
            row.last_end = delta.last_end
        rows.append(model(**{name: getattr(row, name) for name in (*names, *SUMS, *ENDS)}))
    manager.bulk_create(
        rows, update_conflicts=True, unique_fields=list(names), update_fields=[*SUMS, *ENDS]
    )


def add(records: Iterable[UsageRecord]) -> None:
    """Count these newly written ledger rows into the rollups, inside the transaction that
    wrote them (six statements, whatever the number of rows)."""
    records = list(records)
    if not records:
        return
    for model, names, coarse, key_of in (
        (UnitRollup, UNIT_KEY, ("grain", "period", "unit_uid"), _unit_key),
        (PackageRollup, PACKAGE_KEY, ("grain", "period", "tenant_id", "package_id"), _package_key),
    ):
        deltas: dict[tuple, Delta] = {}
        for record in records:
            for grain in Grain.values:
                deltas.setdefault(key_of(record, grain), Delta()).add(record)
        _add_to(model, names, coarse, deltas)


# ------------------------------------------------------------------- recomputed from the ledger


def _aggregated(rows: QuerySet, names: Sequence[str], grain: str) -> QuerySet:
    # `correction` names UsageRecord's reverse one-to-one: the annotation is `is_correction`.
    fields = [
        "is_correction" if name == "correction" else name
        for name in names
        if name not in ("grain", "period")
    ]
    return (
        rows.annotate(
            period=Trunc("start", grain, tzinfo=UTC),
            is_correction=ExpressionWrapper(Q(corrects__isnull=False), output_field=BooleanField()),
        )
        .values("period", *fields)
        .annotate(
            records=Count("id"),
            seconds=Sum("seconds"),
            quantity=Sum("quantity"),
            cost=Sum("cost"),
            first_start=Min("start"),
            last_end=Max("end"),
        )
        .order_by()
    )


def computed(
    *,
    record_model: Any = UsageRecord,
    tenant_id: int | None = None,
    months: tuple[datetime, datetime] | None = None,
) -> Iterable[tuple[str, dict]]:
    """Every rollup row the ledger implies (of one tenant, of rows starting in the UTC months
    `[months[0], months[1])`), as (model name, fields): what `rebuild` writes and
    `differences` compares. `record_model` lets a migration pass its historical model."""
    rows = record_model.objects.all()
    if tenant_id is not None:
        rows = rows.filter(tenant_id=tenant_id)
    if months is not None:
        rows = rows.filter(start__gte=months[0], start__lt=months[1])
    for name, names in (("UnitRollup", UNIT_KEY), ("PackageRollup", PACKAGE_KEY)):
        for grain in Grain.values:
            for row in _aggregated(rows, names, grain).iterator(chunk_size=5000):
                period = row.pop("period")
                if "is_correction" in row:
                    row["correction"] = row.pop("is_correction")
                yield name, {"grain": grain, "period": period.astimezone(UTC).date(), **row}


def rebuild(*, models: dict[str, Any] | None = None) -> int:
    """Replace every rollup with what the ledger implies; returns the rows written."""
    models = models or {
        "UsageRecord": UsageRecord,
        "UnitRollup": UnitRollup,
        "PackageRollup": PackageRollup,
    }
    written = 0
    with transaction.atomic():
        batches: dict[str, list] = {"UnitRollup": [], "PackageRollup": []}
        models["UnitRollup"].objects.all().delete()
        models["PackageRollup"].objects.all().delete()
        for name, fields in computed(record_model=models["UsageRecord"]):
            batches[name].append(models[name](**fields))
            if len(batches[name]) >= 5000:
                models[name].objects.bulk_create(batches[name])
                written += len(batches[name])
                batches[name] = []
        for name, batch in batches.items():
            models[name].objects.bulk_create(batch)
            written += len(batch)
    return written


@dataclass(frozen=True)
class Difference:
    model: str
    key: tuple
    stored: tuple | None
    expected: tuple | None


def _values(fields: dict) -> tuple:
    return (
        int(fields["records"]),
        Decimal(fields["seconds"]),
        Decimal(fields["quantity"]),
        Decimal(fields["cost"]),
    )


def differences(
    *, tenant_id: int | None = None, months: tuple[datetime, datetime] | None = None
) -> list[Difference]:
    """The rollup rows (of one tenant, of the UTC months `[months[0], months[1])`) that do
    not hold the sums of their ledger rows (missing, extra or different): none while every
    writer goes through `add`."""
    expected: dict[tuple[str, tuple], tuple] = {}
    for name, fields in computed(tenant_id=tenant_id, months=months):
        names = UNIT_KEY if name == "UnitRollup" else PACKAGE_KEY
        key = tuple(fields[n] for n in names)
        expected[(name, key)] = _values(fields)
    found: list[Difference] = []
    for model, names in ((UnitRollup, UNIT_KEY), (PackageRollup, PACKAGE_KEY)):
        stored = model.objects.all()
        if tenant_id is not None:
            stored = stored.filter(tenant_id=tenant_id)
        if months is not None:
            stored = stored.filter(
                period__gte=months[0].astimezone(UTC).date(),
                period__lt=months[1].astimezone(UTC).date(),
            )
        for row in stored.values(*names, *SUMS).iterator(chunk_size=5000):
            key = tuple(row[n] for n in names)
            want = expected.pop((model.__name__, key), None)
            have = _values(row)
            if want != have and not (want is None and have == (0, 0, 0, 0)):
                found.append(Difference(model.__name__, key, have, want))
    found += [Difference(name, key, None, want) for (name, key), want in expected.items()]
    return found
