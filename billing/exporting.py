"""Usage exports rendered by PostgreSQL: the ledger rows that start in a period, as FOCUS 1.2
CSV, CloudEvents (OpenMeter) or Stripe meter events, written by `COPY (SELECT ...) TO STDOUT`
from a queryset whose columns are the format's fields. Python only moves the bytes, so an
export runs near the speed of a plain COPY of the rows (docs/benchmarks.md, bench.ledger)
instead of 120x slower row by row; `billing.jobs` runs it in a Celery worker as an export
resource with progress. Every row or line carries the row's deterministic id, so a receiver
counts an export sent twice once.

The text is PostgreSQL's: times are RFC 3339 in UTC with "Z" (a fraction only when there is
one), amounts are numerics without exponent, `x_Devices` and `devices` are jsonb as
PostgreSQL writes it, and rounding to hours (PricingQuantity) or whole seconds (Stripe) is
half to even, as the ledger rounds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import BinaryIO

from django.conf import settings
from django.db import connection
from django.db.models import (
    BigIntegerField,
    Case,
    DateTimeField,
    DecimalField,
    Expression,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    IntegerField,
    JSONField,
    Q,
    QuerySet,
    TextField,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Concat, Floor, Left, NullIf, Round, Trunc
from django.db.models.lookups import Exact, GreaterThan

from billing import prices
from billing.models import QuantityUnit, ReservationUse, UsageRecord

PROVIDER = "GPU control plane"
CLOUDEVENT_TYPE = "io.lokiwager.gpu.usage"
CORRECTION_SUFFIX = ".correction"
STRIPE_EVENT_NAME_MAX = 100
# Text is written as soon as this much has come from the server (and the progress with it).
BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class Format:
    name: str
    content_type: str
    filename_suffix: str
    # The COPY options: FOCUS is CSV with a header; NDJSON is one JSON text per line, written
    # as CSV whose quote and delimiter never occur in jsonb's text (it escapes control
    # characters), so nothing is quoted or escaped.
    copy_options: str
    rows: Callable[[QuerySet, Context], QuerySet]


@dataclass(frozen=True)
class Context:
    source: str = ""  # CloudEvents `source`, e.g. //controlplane.example/billing
    event_prefix: str = ""  # Stripe event names: prefix + package
    provider: str = PROVIDER


# ------------------------------------------------------------------------------ expressions


def _text(value: str) -> Value:
    return Value(value, output_field=TextField())


def _utc(expression: Expression | F) -> Func:
    return Func(
        expression,
        template="(%(expressions)s AT TIME ZONE 'UTC')",
        output_field=DateTimeField(),
    )


def iso(expression: Expression | F) -> Expression:
    """A timestamptz as RFC 3339 in UTC: `2026-12-01T17:00:00Z`, `...:01.250000Z` with a
    fraction only when it has one."""
    whole = Exact(Trunc(expression, "second"), expression)
    return Concat(
        Func(
            _utc(expression),
            _text('YYYY-MM-DD"T"HH24:MI:SS'),
            function="to_char",
            output_field=TextField(),
        ),
        Case(
            When(whole, then=_text("")),
            default=Func(
                _utc(expression), _text(".US"), function="to_char", output_field=TextField()
            ),
            output_field=TextField(),
        ),
        _text("Z"),
        output_field=TextField(),
    )


def _month(expression: Expression | F, *, later: bool = False) -> Expression:
    """The start of the UTC month of `expression` (or of the next), as RFC 3339."""
    month = Func(
        _text("month"), _utc(expression), function="date_trunc", output_field=DateTimeField()
    )
    if later:
        month = Func(
            month,
            template="(%(expressions)s + interval '1 month')",
            output_field=DateTimeField(),
        )
    return Func(
        month, _text('YYYY-MM-DD"T"HH24:MI:SS"Z"'), function="to_char", output_field=TextField()
    )


def _half_even(scaled: Expression | F, places: int) -> Expression:
    """`scaled` (a numeric already multiplied by 10**places) rounded half to even, divided
    back: the ledger's rounding (Python's ROUND_HALF_EVEN), not PostgreSQL's round(), which
    rounds half away from zero. Symmetric for negative values (corrections)."""
    decimal = DecimalField()
    size = Func(scaled, function="abs", output_field=decimal)
    floor = Floor(size, output_field=decimal)
    even_tie = Exact(
        ExpressionWrapper(size - floor, output_field=decimal), Value(Decimal("0.5"))
    ) & Exact(Func(floor, Value(Decimal(2)), function="mod", output_field=decimal), Value(0))
    rounded = ExpressionWrapper(
        Func(scaled, function="sign", output_field=decimal)
        * Case(When(even_tie, then=floor), default=Round(size), output_field=decimal),
        output_field=decimal,
    )
    return Round(
        ExpressionWrapper(rounded / Value(Decimal(10**places)), output_field=decimal),
        places,
        output_field=decimal,
    )


def _number(field: str) -> Expression:
    return Cast(F(field), TextField())


def _customer() -> Expression:
    """Who the billing system bills: the tenant's customer id there, else its slug."""
    return Coalesce(
        NullIf(F("tenant__billing_customer_id"), _text(""), output_field=TextField()),
        F("tenant__slug"),
        output_field=TextField(),
    )


def _device_count() -> Expression:
    length = Func(F("devices"), function="jsonb_array_length", output_field=IntegerField())
    return Case(
        When(GreaterThan(length, 0), then=length),
        When(
            ~Q(seconds=0),
            then=Cast(
                Func(F("quantity") / F("seconds"), function="trunc", output_field=DecimalField()),
                IntegerField(),
            ),
        ),
        default=Value(0),
        output_field=IntegerField(),
    )


def _description() -> Expression:
    """`<package> on <n> device(s)|share(s), <unit>`."""
    count = _device_count()
    return Concat(
        F("package_id"),
        _text(" on "),
        Cast(count, TextField()),
        Case(
            When(quantity_unit=QuantityUnit.SHARE_SECONDS, then=_text(" share")),
            default=_text(" device"),
            output_field=TextField(),
        ),
        Case(When(Exact(count, 1), then=_text("")), default=_text("s"), output_field=TextField()),
        _text(", "),
        F("unit_name"),
        output_field=TextField(),
    )


def _is_correction() -> Q:
    return Q(corrects__isnull=False)


def _json(*pairs: tuple[str, Expression | F | Value]) -> Func:
    args: list = []
    for key, value in pairs:
        args += [_text(key), value]
    return Func(*args, function="jsonb_build_object", output_field=JSONField())


# ---------------------------------------------------------------------------------- formats


FOCUS_COLUMNS = [
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "CapacityReservationId",
    "CapacityReservationStatus",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "SkuId",
    "SkuPriceId",
    "SubAccountId",
    "x_UsageId",
    "x_ClaimUid",
    "x_Alternative",
    "x_Devices",
]


def focus_rows(records: QuerySet, context: Context) -> QuerySet:
    """FOCUS 1.2: costs are the ledger's cost, unit prices its hourly price; a correction is
    ChargeClass=Correction with negated quantities and costs. An empty value is an empty
    field (NULL in COPY's CSV), as a CSV writer leaves it."""
    cost, hourly = _number("cost"), _number("hourly")
    columns: dict[str, Expression | F | Value] = {
        "BilledCost": cost,
        "BillingAccountId": _customer(),
        "BillingAccountName": F("tenant__slug"),
        "BillingCurrency": F("currency"),
        "BillingPeriodEnd": _month(F("start"), later=True),
        "BillingPeriodStart": _month(F("start")),
        # A unit's time on a reservation (Used), or a reservation's slot time no unit used
        # (Unused): FOCUS 1.2's capacity reservation columns; empty otherwise.
        "CapacityReservationId": Cast(F("reservation_uid"), TextField()),
        "CapacityReservationStatus": NullIf(
            F("reservation_status"), _text(""), output_field=TextField()
        ),
        "ChargeCategory": _text("Usage"),
        "ChargeClass": Case(
            When(_is_correction(), then=_text("Correction")), output_field=TextField()
        ),
        "ChargeDescription": _description(),
        "ChargeFrequency": _text("Usage-Based"),
        "ChargePeriodEnd": iso(F("end")),
        "ChargePeriodStart": iso(F("start")),
        "ConsumedQuantity": _number("quantity"),
        "ConsumedUnit": Case(
            When(quantity_unit=QuantityUnit.SHARE_SECONDS, then=_text("GPU-Share-Seconds")),
            default=_text("GPU-Seconds"),
            output_field=TextField(),
        ),
        "ContractedCost": cost,
        "ContractedUnitPrice": hourly,
        "EffectiveCost": cost,
        "InvoiceIssuerName": _text(context.provider),
        "ListCost": cost,
        "ListUnitPrice": hourly,
        # FOCUS's Dynamic: a price for capacity the provider may take back (spot).
        "PricingCategory": Case(
            When(alternative=prices.INTERRUPTIBLE, then=_text("Dynamic")),
            default=_text("Standard"),
            output_field=TextField(),
        ),
        "PricingQuantity": Cast(
            _half_even(
                ExpressionWrapper(
                    F("seconds") * Value(Decimal(1_000_000)) / Value(Decimal(3600)),
                    output_field=DecimalField(),
                ),
                6,
            ),
            TextField(),
        ),
        "PricingUnit": _text("Hours"),
        "ProviderName": _text(context.provider),
        "PublisherName": _text(context.provider),
        # Regions are named by one identifier, so the name is the id.
        "RegionId": NullIf(F("region"), _text(""), output_field=TextField()),
        "RegionName": NullIf(F("region"), _text(""), output_field=TextField()),
        "ResourceId": Cast(F("unit_uid"), TextField()),
        "ResourceName": F("unit_name"),
        "ResourceType": Case(
            When(reservation_status=ReservationUse.UNUSED, then=_text("Capacity reservation")),
            default=_text("GPU unit"),
            output_field=TextField(),
        ),
        "ServiceCategory": _text("AI and Machine Learning"),
        "ServiceName": _text("GPU units"),
        "SkuId": F("package_id"),
        "SkuPriceId": Cast(F("price_version_id"), TextField()),
        "SubAccountId": F("tenant__slug"),
        "x_UsageId": Cast(F("id"), TextField()),
        "x_ClaimUid": NullIf(F("claim_uid"), _text(""), output_field=TextField()),
        "x_Alternative": NullIf(F("alternative"), _text(""), output_field=TextField()),
        "x_Devices": Cast(F("devices"), TextField()),
    }
    assert list(columns) == FOCUS_COLUMNS
    return records.values(**columns)


def cloudevent_rows(records: QuerySet, context: Context) -> QuerySet:
    """A CloudEvents 1.0 structured event per row, as OpenMeter ingests it: a meter SUMs
    data.quantity or data.cost, grouped by data.package. `source` + `id` is unique; `time`
    is the row's end (the usage is complete, so billable, then); corrections are typed
    `....correction` with negated values."""
    correction = _is_correction()
    data = _json(
        ("tenant", F("tenant__slug")),
        ("customer", _customer()),
        ("unit", F("unit_name")),
        ("unitUid", Cast(F("unit_uid"), TextField())),
        ("region", F("region")),
        ("package", F("package_id")),
        ("alternative", F("alternative")),
        ("claimUid", F("claim_uid")),
        ("start", iso(F("start"))),
        ("end", iso(F("end"))),
        ("seconds", _number("seconds")),
        ("quantity", _number("quantity")),
        ("quantityUnit", F("quantity_unit")),
        ("hourlyPrice", _number("hourly")),
        ("cost", _number("cost")),
        ("currency", F("currency")),
        ("devices", F("devices")),
        ("corrects", Cast(F("corrects_id"), TextField())),
    )
    event = _json(
        ("specversion", _text("1.0")),
        ("id", Cast(F("id"), TextField())),
        ("source", _text(context.source)),
        (
            "type",
            Case(
                When(correction, then=_text(CLOUDEVENT_TYPE + CORRECTION_SUFFIX)),
                default=_text(CLOUDEVENT_TYPE),
                output_field=TextField(),
            ),
        ),
        ("subject", F("tenant__slug")),
        ("time", iso(F("end"))),
        ("datacontenttype", _text("application/json")),
        ("data", data),
    )
    return records.values(event=event)


def stripe_rows(records: QuerySet, context: Context) -> QuerySet:
    """The body of Stripe's POST /v1/billing/meter_events per row: the quantity in whole
    seconds, at the row's start; `identifier` is the row's id, so a resend is deduplicated.
    Corrections are left out: a meter event cannot carry a negative value (Stripe's way is
    a meter event adjustment, which this export does not make). Stripe takes events from the
    past 35 days only."""
    name = Left(
        Func(
            Concat(_text(context.event_prefix), F("package_id"), output_field=TextField()),
            _text("[^A-Za-z0-9_]"),
            _text("_"),
            _text("g"),
            function="regexp_replace",
            output_field=TextField(),
        ),
        STRIPE_EVENT_NAME_MAX,
    )
    epoch = Func(_text("epoch"), F("start"), function="date_part", output_field=FloatField())
    event = _json(
        ("event_name", name),
        ("identifier", Cast(F("id"), TextField())),
        ("timestamp", Cast(Floor(epoch), BigIntegerField())),
        (
            "payload",
            _json(
                ("stripe_customer_id", _customer()),
                (
                    "value",
                    Cast(Cast(_half_even(F("quantity"), 0), BigIntegerField()), TextField()),
                ),
            ),
        ),
    )
    return records.filter(corrects__isnull=True).values(event=event)


_NDJSON = "FORMAT csv, QUOTE E'\\x01', DELIMITER E'\\x02'"
FORMATS: dict[str, Format] = {
    fmt.name: fmt
    for fmt in (
        Format(
            "focus-csv", "text/csv; charset=utf-8", ".focus.csv", "FORMAT csv, HEADER", focus_rows
        ),
        Format(
            "cloudevents", "application/x-ndjson", ".cloudevents.ndjson", _NDJSON, cloudevent_rows
        ),
        Format("stripe", "application/x-ndjson", ".stripe.ndjson", _NDJSON, stripe_rows),
    )
}


def context(source: str = "") -> Context:
    return Context(source=source, event_prefix=settings.BILLING_STRIPE_EVENT_PREFIX)


def records_starting(start: datetime, end: datetime) -> QuerySet:
    """The ledger rows that start in `[start, end)`, oldest first: what an export of that
    period carries (each row in exactly one of two adjacent periods)."""
    return UsageRecord.objects.filter(start__gte=start, start__lt=end).order_by("start", "id")


def copy_to(
    fmt_name: str,
    start: datetime,
    end: datetime,
    out: BinaryIO,
    *,
    source: str = "",
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Write the rows that start in `[start, end)` to `out` in format `fmt_name`; returns the
    rows written (as PostgreSQL counts them). `on_progress(rows so far)` is called about every
    BLOCK_BYTES written, and once at the end."""
    try:
        fmt = FORMATS[fmt_name]
    except KeyError:
        raise ValueError(
            f"unknown export format {fmt_name!r} (one of {', '.join(FORMATS)})"
        ) from None
    query = fmt.rows(records_starting(start, end), context(source))
    sql, params = query.query.sql_with_params()
    header = 1 if fmt.name == "focus-csv" else 0
    lines = 0
    pending = 0
    with connection.cursor() as wrapper:
        # psycopg's own cursor: the copy() of Django's wrapper takes no parameters.
        cursor = wrapper.cursor
        with cursor.copy(f"COPY ({sql}) TO STDOUT WITH ({fmt.copy_options})", params) as copy:
            for block in copy:
                out.write(block)
                if on_progress is not None:
                    # Rows so far, for progress only (a CSV field may hold a newline).
                    lines += bytes(block).count(b"\n")
                    pending += len(block)
                    if pending >= BLOCK_BYTES:
                        pending = 0
                        on_progress(max(lines - header, 0))
        rows = cursor.rowcount  # COPY's own count
    if on_progress is not None:
        on_progress(rows)
    return rows
