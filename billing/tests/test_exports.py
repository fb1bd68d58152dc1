"""Ledger exports (billing.exporting, rendered by PostgreSQL through COPY): FOCUS columns parse
as their types, CloudEvents and Stripe meter events have the shapes their receivers take, and
the same rows always render to the same bytes."""

from __future__ import annotations

import csv
import io
import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import override_settings

from billing import exporting, ledger, periods
from billing.models import PriceVersion, QuantityUnit, UsageRecord
from tenancy.models import Tenant
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
SOURCE = "//controlplane.example/billing"
PREFIX = "gpu_seconds_"
UNIT_UID = uuid.UUID("3d2b1f8e-0000-4000-8000-000000000001")
SHARED_UID = uuid.UUID("3d2b1f8e-0000-4000-8000-000000000002")
DECIMAL_COLUMNS = [
    "BilledCost",
    "ConsumedQuantity",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "ListCost",
    "ListUnitPrice",
    "PricingQuantity",
]
DATETIME_COLUMNS = [
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
]


@dataclass
class Version:
    id: int
    effective_from: datetime
    hourly: Decimal


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def usage(
    tenant: Tenant,
    *,
    unit_uid: uuid.UUID,
    unit_name: str,
    package_id: str,
    start: datetime,
    end: datetime,
    versions: list[Version],
    devices: list[dict],
    quantity_unit: QuantityUnit = QuantityUnit.DEVICE_SECONDS,
) -> list[UsageRecord]:
    claim_uid = f"claim-{unit_uid}"
    version_ids = {version.effective_from: version.id for version in versions}
    records = []
    for piece in periods.priced_pieces(start, end, count=len(devices), versions=versions):
        record = UsageRecord(
            id=periods.record_id(unit_uid, claim_uid, piece.start),
            unit_uid=unit_uid,
            unit_name=unit_name,
            package_id=package_id,
            claim_uid=claim_uid,
            devices=devices,
            start=piece.start,
            end=piece.end,
            seconds=piece.seconds,
            quantity=piece.quantity,
            quantity_unit=quantity_unit,
            price_version_id=version_ids[piece.version.effective_from] if piece.version else None,
            hourly=piece.hourly,
            currency="EUR",
            cost=piece.cost,
        )
        record.tenant = tenant
        records.append(record)
    return records


def correction_of(record: UsageRecord) -> UsageRecord:
    correction = ledger.correction_for(record, note="billed twice")
    correction.tenant = record.tenant
    return correction


@pytest.fixture
def records() -> list[UsageRecord]:
    """Two devices across an hour boundary and a price change (fractional seconds at both
    ends), a share on a tenant with no billing customer across New Year, and a correction."""
    acme = TenantFactory(slug="acme")
    Tenant.objects.filter(pk=acme.pk).update(billing_customer_id="cus_Q1w2E3r4")
    acme.refresh_from_db()
    lab = TenantFactory(slug="lab")
    dedicated = usage(
        acme,
        unit_uid=UNIT_UID,
        unit_name="trainer",
        package_id="gpu-h100-2x.cpu16",
        start=at("2026-12-01T16:59:58.750000"),
        end=at("2026-12-01T18:00:01.250000"),
        versions=[
            Version(1, at("2026-11-01T00:00:00"), Decimal("2.5000")),
            Version(2, at("2026-12-01T17:30:00"), Decimal("3.0000")),
        ],
        devices=[{"pool": "node-a", "device": "gpu-0"}, {"pool": "node-a", "device": "gpu-1"}],
    )
    shared = usage(
        lab,
        unit_uid=SHARED_UID,
        unit_name="notebook",
        package_id="gpu-a100-share",
        start=at("2026-12-31T23:30:00"),
        end=at("2027-01-01T00:15:00"),
        versions=[],
        devices=[{"pool": "node-b", "device": "gpu-3", "shareID": "s-1"}],
        quantity_unit=QuantityUnit.SHARE_SECONDS,
    )
    saved = [*dedicated, *shared, correction_of(dedicated[1])]
    for version in (1, 2):  # the versions the rows name
        PriceVersion.objects.create(
            id=version,
            package_id="gpu-h100-2x.cpu16",
            hourly=Decimal("2.5") + version - 1,
            currency="EUR",
            effective_from=at("2026-11-01T00:00:00") + timedelta(days=version),
        )
    UsageRecord.objects.bulk_create(saved)
    return saved


EVERYTHING = (at("2026-01-01T00:00:00"), at("2028-01-01T00:00:00"))


def exported(fmt_name: str, *, prefix: str = PREFIX) -> bytes:
    out = io.BytesIO()
    with override_settings(BILLING_STRIPE_EVENT_PREFIX=prefix):
        exporting.copy_to(fmt_name, *EVERYTHING, out, source=SOURCE)
    return out.getvalue()


def in_order(items: list[dict], records: list[UsageRecord], key) -> list[dict]:
    """The exported items in the fixture's order (an export is in start, id order)."""
    by_id = {key(item): item for item in items}
    return [by_id[str(record.id)] for record in records if str(record.id) in by_id]


def focus_rows(records: list[UsageRecord]) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(exported("focus-csv").decode()))
    rows = list(reader)
    return list(reader.fieldnames or []), in_order(rows, records, lambda row: row["x_UsageId"])


def ndjson(fmt_name: str, records: list[UsageRecord], *, prefix: str = PREFIX) -> list[dict]:
    lines = exported(fmt_name, prefix=prefix).decode().splitlines()
    events = [json.loads(line) for line in lines]
    return in_order(events, records, lambda e: e.get("id") or e.get("identifier"))


def test_times_are_utc_with_z_and_a_fraction_only_when_present(records) -> None:
    _, rows = focus_rows(records)
    assert rows[0]["ChargePeriodStart"] == "2026-12-01T16:59:58.750000Z"
    assert rows[0]["ChargePeriodEnd"] == "2026-12-01T17:00:00Z"


def test_formats_are_named_with_their_content_types() -> None:
    assert {name: fmt.content_type for name, fmt in exporting.FORMATS.items()} == {
        "focus-csv": "text/csv; charset=utf-8",
        "cloudevents": "application/x-ndjson",
        "stripe": "application/x-ndjson",
    }
    assert all(name == fmt.name for name, fmt in exporting.FORMATS.items())


def test_an_unknown_format_is_refused_before_anything_is_written() -> None:
    out = io.BytesIO()
    with pytest.raises(ValueError, match="unknown export format"):
        exporting.copy_to("lago", *EVERYTHING, out)
    assert out.getvalue() == b""


def test_focus_header_names_every_column_when_rendered(records: list[UsageRecord]) -> None:
    header, rows = focus_rows(records)
    assert set(header) == {
        "BilledCost",
        "BillingAccountId",
        "BillingAccountName",
        "BillingCurrency",
        "BillingPeriodStart",
        "BillingPeriodEnd",
        "CapacityReservationId",
        "CapacityReservationStatus",
        "ChargeCategory",
        "ChargeClass",
        "ChargeDescription",
        "ChargeFrequency",
        "ChargePeriodStart",
        "ChargePeriodEnd",
        "ConsumedQuantity",
        "ConsumedUnit",
        "ContractedCost",
        "ContractedUnitPrice",
        "EffectiveCost",
        "ListCost",
        "ListUnitPrice",
        "PricingCategory",
        "PricingQuantity",
        "PricingUnit",
        "ProviderName",
        "PublisherName",
        "InvoiceIssuerName",
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
    }
    assert header == exporting.FOCUS_COLUMNS
    assert len(rows) == len(records)


def test_focus_values_parse_as_their_types_when_rendered(records: list[UsageRecord]) -> None:
    _, rows = focus_rows(records)
    for row, record in zip(rows, records, strict=True):
        for column in DECIMAL_COLUMNS:
            assert isinstance(Decimal(row[column]), Decimal)
            assert "E" not in row[column].upper()
        moments = {column: datetime.fromisoformat(row[column]) for column in DATETIME_COLUMNS}
        assert all(moment.utcoffset() == timedelta(0) for moment in moments.values())
        assert moments["ChargePeriodStart"] < moments["ChargePeriodEnd"]
        assert (
            moments["BillingPeriodStart"]
            <= moments["ChargePeriodStart"]
            < moments["BillingPeriodEnd"]
        )
        assert moments["ChargePeriodStart"] == record.start
        assert moments["ChargePeriodEnd"] == record.end
        assert Decimal(row["BilledCost"]) == record.cost
        assert Decimal(row["ConsumedQuantity"]) == record.quantity
        assert Decimal(row["ListUnitPrice"]) == record.hourly
        assert Decimal(row["PricingQuantity"]) == (record.seconds / 3600).quantize(
            Decimal("0.000001")
        )
        assert row["x_UsageId"] == str(record.id)
        assert json.loads(row["x_Devices"]) == record.devices


def test_focus_names_the_customer_and_month_when_rendered(records: list[UsageRecord]) -> None:
    _, rows = focus_rows(records)
    first, *_, new_years_eve, new_year, _correction = rows
    assert first["BillingAccountId"] == "cus_Q1w2E3r4"
    assert first["SubAccountId"] == first["BillingAccountName"] == "acme"
    assert first["BillingPeriodStart"] == "2026-12-01T00:00:00Z"
    assert first["BillingPeriodEnd"] == "2027-01-01T00:00:00Z"
    assert first["ChargePeriodStart"] == "2026-12-01T16:59:58.750000Z"
    assert first["ConsumedUnit"] == "GPU-Seconds"
    assert first["SkuPriceId"] == "1"
    assert first["ChargeClass"] == ""
    assert first["ChargeDescription"] == "gpu-h100-2x.cpu16 on 2 devices, trainer"
    assert new_years_eve["BillingAccountId"] == "lab"
    assert new_years_eve["ConsumedUnit"] == "GPU-Share-Seconds"
    assert new_years_eve["SkuPriceId"] == ""
    assert new_year["BillingPeriodStart"] == "2027-01-01T00:00:00Z"
    assert new_year["BillingPeriodEnd"] == "2027-02-01T00:00:00Z"


def test_focus_marks_a_correction_when_a_row_is_reversed(records: list[UsageRecord]) -> None:
    _, rows = focus_rows(records)
    corrected, correction = rows[1], rows[-1]
    assert correction["ChargeClass"] == "Correction"
    assert Decimal(correction["BilledCost"]) < 0
    assert Decimal(correction["BilledCost"]) == -Decimal(corrected["BilledCost"])
    assert Decimal(correction["ConsumedQuantity"]) == -Decimal(corrected["ConsumedQuantity"])
    assert correction["x_UsageId"] != corrected["x_UsageId"]


def test_cloudevents_carry_the_required_attributes_when_rendered(
    records: list[UsageRecord],
) -> None:
    events = ndjson("cloudevents", records)
    assert len(events) == len(records)
    for event, record in zip(events, records, strict=True):
        for attribute in ("specversion", "id", "source", "type"):
            assert isinstance(event[attribute], str)
            assert event[attribute]
        assert event["specversion"] == "1.0"
        assert event["source"] == SOURCE
        assert event["id"] == str(record.id)
        assert RFC3339.match(event["time"])
        assert datetime.fromisoformat(event["time"]) == record.end
        assert Decimal(event["data"]["quantity"]) == record.quantity
        assert Decimal(event["data"]["cost"]) == record.cost
    assert len({(event["source"], event["id"]) for event in events}) == len(events)
    assert [event["type"] for event in events[-2:]] == [
        "io.lokiwager.gpu.usage",
        "io.lokiwager.gpu.usage.correction",
    ]
    assert events[-1]["data"]["corrects"] == str(records[1].id)
    assert events[0]["data"]["corrects"] is None
    assert events[0]["data"]["customer"] == "cus_Q1w2E3r4"


def test_stripe_events_are_meter_event_bodies_when_rendered(records: list[UsageRecord]) -> None:
    events = ndjson("stripe", records)
    for event in events:
        assert set(event) == {"event_name", "identifier", "timestamp", "payload"}
        assert len(event["event_name"]) <= 100
        assert re.fullmatch(r"[A-Za-z0-9_]+", event["event_name"])
        assert type(event["timestamp"]) is int
        assert set(event["payload"]) == {"stripe_customer_id", "value"}
        assert all(isinstance(value, str) for value in event["payload"].values())
        assert re.fullmatch(r"\d+", event["payload"]["value"])
    first = events[0]
    assert first["event_name"] == "gpu_seconds_gpu_h100_2x_cpu16"
    assert first["identifier"] == str(records[0].id)
    # 16:59:58.75 floors to :58; 1.25 s on two devices is 2.5, half-even to 2.
    assert first["timestamp"] == int(at("2026-12-01T16:59:58").timestamp())
    assert first["payload"] == {"stripe_customer_id": "cus_Q1w2E3r4", "value": "2"}


def test_stripe_skips_a_correction_when_rendered(records: list[UsageRecord]) -> None:
    events = ndjson("stripe", records)
    assert len(events) == len(records) - 1
    correction = records[-1]
    assert correction.corrects_id is not None
    assert str(correction.id) not in {event["identifier"] for event in events}


def test_stripe_event_name_stays_within_100_chars_when_the_prefix_is_long(
    records: list[UsageRecord],
) -> None:
    for event in ndjson("stripe", records, prefix="usage." * 20):
        name = event["event_name"]
        assert len(name) == 100
        assert re.fullmatch(r"[A-Za-z0-9_]+", name)


@pytest.mark.parametrize("fmt_name", sorted(exporting.FORMATS))
def test_rendering_is_byte_identical_when_done_twice(
    fmt_name: str, records: list[UsageRecord]
) -> None:
    first = exported(fmt_name)
    assert first
    assert exported(fmt_name) == first


def test_progress_is_reported_as_blocks_come_and_the_rows_counted(
    records: list[UsageRecord], monkeypatch
) -> None:
    monkeypatch.setattr(exporting, "BLOCK_BYTES", 1)  # a report after every block
    seen: list[int] = []
    out = io.BytesIO()
    written = exporting.copy_to("cloudevents", *EVERYTHING, out, on_progress=seen.append)
    assert written == len(records) == seen[-1]
    assert len(seen) > 1  # part way, then at the end
    assert seen == sorted(seen)
    assert out.getvalue().count(b"\n") == len(records)
