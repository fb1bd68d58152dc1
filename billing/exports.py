"""Usage ledger rows rendered for billing systems: FOCUS 1.2 CSV, CloudEvents for OpenMeter and
Stripe meter events. Pure generators of text lines (no queries: each record's tenant is loaded),
so a StreamingHttpResponse streams them; every line carries the row's deterministic id."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Protocol

from billing.models import QuantityUnit, UsageRecord

PROVIDER = "GPU control plane"
CLOUDEVENT_TYPE = "io.lokiwager.gpu.usage"
CORRECTION_SUFFIX = ".correction"
HOURS_PLACES = Decimal("0.000001")
STRIPE_EVENT_NAME_MAX = 100
STRIPE_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

CONSUMED_UNITS = {
    QuantityUnit.DEVICE_SECONDS: "GPU-Seconds",
    QuantityUnit.SHARE_SECONDS: "GPU-Share-Seconds",
}

FOCUS_COLUMNS = [
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
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


class Renderer(Protocol):
    def __call__(
        self, records: Iterable[UsageRecord], *, source: str, event_prefix: str, provider: str
    ) -> Iterator[str]: ...


@dataclass(frozen=True)
class Format:
    name: str
    content_type: str
    filename_suffix: str
    render: Renderer


def iso(moment: datetime) -> str:
    """`moment` in UTC as RFC 3339 with "Z": whole seconds unless it has a fraction."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}: ledger times are aware")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def decimal_text(value: Decimal) -> str:
    """Plain digits, never an exponent; a negated zero (a free row's correction) is "0"."""
    value = Decimal(value)
    if value.is_zero():
        value = abs(value)
    return format(value, "f")


def billing_period(moment: datetime) -> tuple[datetime, datetime]:
    """The UTC calendar month `moment` falls in, as `[start, end)`."""
    start = moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def customer(record: UsageRecord) -> str:
    """Who the billing system bills: the tenant's customer id there, else its slug."""
    return record.tenant.billing_customer_id or record.tenant.slug


def device_count(record: UsageRecord) -> int:
    if record.devices:
        return len(record.devices)
    if record.seconds:
        return int(Decimal(record.quantity) / Decimal(record.seconds))
    return 0


def charge_description(record: UsageRecord) -> str:
    count = device_count(record)
    held = "share" if record.quantity_unit == QuantityUnit.SHARE_SECONDS else "device"
    return f"{record.package_id} on {count} {held}{'' if count == 1 else 's'}, {record.unit_name}"


def _is_correction(record: UsageRecord) -> bool:
    return record.corrects_id is not None


class _Echo:
    """A file whose write hands back the line, so csv.writer can feed a generator."""

    def write(self, text: str) -> str:
        return text


def focus_row(record: UsageRecord, *, provider: str = PROVIDER) -> dict[str, str]:
    """One FOCUS 1.2 row: costs are the ledger's cost, unit prices its hourly price."""
    period_start, period_end = billing_period(record.start)
    cost = decimal_text(record.cost)
    hourly = decimal_text(record.hourly)
    hours = (Decimal(record.seconds) / Decimal(3600)).quantize(
        HOURS_PLACES, rounding=ROUND_HALF_EVEN
    )
    return {
        "BilledCost": cost,
        "BillingAccountId": customer(record),
        "BillingAccountName": record.tenant.slug,
        "BillingCurrency": record.currency,
        "BillingPeriodEnd": iso(period_end),
        "BillingPeriodStart": iso(period_start),
        "ChargeCategory": "Usage",
        "ChargeClass": "Correction" if _is_correction(record) else "",
        "ChargeDescription": charge_description(record),
        "ChargeFrequency": "Usage-Based",
        "ChargePeriodEnd": iso(record.end),
        "ChargePeriodStart": iso(record.start),
        "ConsumedQuantity": decimal_text(record.quantity),
        "ConsumedUnit": CONSUMED_UNITS[QuantityUnit(record.quantity_unit)],
        "ContractedCost": cost,
        "ContractedUnitPrice": hourly,
        "EffectiveCost": cost,
        "InvoiceIssuerName": provider,
        "ListCost": cost,
        "ListUnitPrice": hourly,
        "PricingCategory": "Standard",
        "PricingQuantity": decimal_text(hours),
        "PricingUnit": "Hours",
        "ProviderName": provider,
        "PublisherName": provider,
        "ResourceId": str(record.unit_uid),
        "ResourceName": record.unit_name,
        "ResourceType": "GPU unit",
        "ServiceCategory": "AI and Machine Learning",
        "ServiceName": "GPU units",
        "SkuId": record.package_id,
        "SkuPriceId": "" if record.price_version_id is None else str(record.price_version_id),
        "SubAccountId": record.tenant.slug,
        "x_UsageId": str(record.id),
        "x_ClaimUid": record.claim_uid,
        "x_Alternative": record.alternative,
        "x_Devices": json.dumps(record.devices, sort_keys=True, separators=(",", ":")),
    }


def render_focus_csv(
    records: Iterable[UsageRecord],
    *,
    source: str = "",
    event_prefix: str = "",
    provider: str = PROVIDER,
) -> Iterator[str]:
    """A FOCUS 1.2 CSV: the header line, then one line per record (corrections included, as
    ChargeClass=Correction with negated quantities and costs). `source` and `event_prefix` are
    unused here; they keep every format's signature the same."""
    writer = csv.DictWriter(_Echo(), fieldnames=FOCUS_COLUMNS, lineterminator="\n")
    yield writer.writeheader()
    for record in records:
        yield writer.writerow(focus_row(record, provider=provider))


def cloudevent(record: UsageRecord, *, source: str) -> dict[str, Any]:
    """A CloudEvents 1.0 structured event, as OpenMeter ingests it: a meter SUMs data.quantity
    or data.cost, grouped by data.package. `source` + `id` is unique, as the spec requires."""
    correction = _is_correction(record)
    return {
        "specversion": "1.0",
        "id": str(record.id),
        "source": source,
        "type": CLOUDEVENT_TYPE + (CORRECTION_SUFFIX if correction else ""),
        "subject": record.tenant.slug,
        # The usage is complete, and so billable, at its end.
        "time": iso(record.end),
        "datacontenttype": "application/json",
        "data": {
            "tenant": record.tenant.slug,
            "customer": customer(record),
            "unit": record.unit_name,
            "unitUid": str(record.unit_uid),
            "package": record.package_id,
            "alternative": record.alternative,
            "claimUid": record.claim_uid,
            "start": iso(record.start),
            "end": iso(record.end),
            "seconds": decimal_text(record.seconds),
            "quantity": decimal_text(record.quantity),
            "quantityUnit": str(record.quantity_unit),
            "hourlyPrice": decimal_text(record.hourly),
            "cost": decimal_text(record.cost),
            "currency": record.currency,
            "devices": record.devices,
            "corrects": str(record.corrects_id) if correction else None,
        },
    }


def render_cloudevents(
    records: Iterable[UsageRecord],
    *,
    source: str,
    event_prefix: str = "",
    provider: str = PROVIDER,
) -> Iterator[str]:
    """One CloudEvent per line (NDJSON), corrections typed `….correction` with negated values.
    `event_prefix` and `provider` are unused here."""
    for record in records:
        yield json.dumps(cloudevent(record, source=source), separators=(",", ":")) + "\n"


def stripe_event_name(event_prefix: str, package_id: str) -> str:
    return STRIPE_UNSAFE.sub("_", event_prefix + package_id)[:STRIPE_EVENT_NAME_MAX]


def stripe_meter_event(record: UsageRecord, *, event_prefix: str) -> dict[str, Any]:
    """The body of POST /v1/billing/meter_events: the quantity in whole seconds (half-even),
    at the record's start; `identifier` is the row's id, so a resend is deduplicated."""
    value = Decimal(record.quantity).quantize(Decimal(1), rounding=ROUND_HALF_EVEN)
    return {
        "event_name": stripe_event_name(event_prefix, record.package_id),
        "identifier": str(record.id),
        "timestamp": (record.start - EPOCH) // timedelta(seconds=1),
        "payload": {"stripe_customer_id": customer(record), "value": str(int(value))},
    }


def render_stripe(
    records: Iterable[UsageRecord],
    *,
    source: str = "",
    event_prefix: str,
    provider: str = PROVIDER,
) -> Iterator[str]:
    """One Stripe meter event per line (NDJSON). Corrections are skipped: their value is
    negative, which a meter event cannot carry; Stripe's way is a meter event adjustment
    (cancelling the original by identifier), which this export does not make. Stripe also
    takes only events from the past 35 days. `source` and `provider` are unused here."""
    for record in records:
        if _is_correction(record):
            continue
        yield (
            json.dumps(stripe_meter_event(record, event_prefix=event_prefix), separators=(",", ":"))
            + "\n"
        )


FORMATS: dict[str, Format] = {
    fmt.name: fmt
    for fmt in (
        Format("focus-csv", "text/csv; charset=utf-8", ".focus.csv", render_focus_csv),
        Format("cloudevents", "application/x-ndjson", ".cloudevents.ndjson", render_cloudevents),
        Format("stripe", "application/x-ndjson", ".stripe.ndjson", render_stripe),
    )
}


def render(
    fmt_name: str,
    records: Iterable[UsageRecord],
    *,
    source: str,
    event_prefix: str,
    provider: str = PROVIDER,
) -> Iterator[str]:
    """The records in format `fmt_name`, as text chunks of one line each. An unknown name
    raises here, before anything is streamed."""
    try:
        fmt = FORMATS[fmt_name]
    except KeyError:
        raise ValueError(
            f"unknown export format {fmt_name!r} (one of {', '.join(FORMATS)})"
        ) from None
    return fmt.render(records, source=source, event_prefix=event_prefix, provider=provider)
