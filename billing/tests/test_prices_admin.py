"""Prices: a saved change is a new version from then (the admin, a YAML import), never an
edit; the ledger's admin is read-only but for corrections."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from billing import ledger
from billing.models import PriceVersion, UsageRecord
from billing.tests.helpers import holding, priced
from catalog.models import Package
from catalog.services import import_catalog
from catalog.tests.factories import PackageFactory
from runtime.tests.factories import UnitFactory

pytestmark = pytest.mark.django_db

L40S = {"name": "l40s", "deviceClassName": "nvidia-l40s", "count": 1}


def versions(package_id: str) -> list[tuple[str, Decimal]]:
    return list(
        PriceVersion.objects.filter(package_id=package_id)
        .order_by("effective_from", "alternative")
        .values_list("alternative", "hourly")
    )


def test_a_saved_price_change_is_a_new_version_and_the_old_one_stays():
    package = PackageFactory(id="h100", price="2.49", alternatives=[L40S])
    assert versions("h100") == [("", Decimal("2.49")), ("l40s", Decimal("2.49"))]
    first = PriceVersion.objects.get(package_id="h100", alternative="")
    package.price = Decimal("2.99")
    package.alternative_prices = {"l40s": "1.19"}
    package.full_clean()
    package.save()
    package.save()  # nothing changed: no version
    assert versions("h100")[2:] == [("", Decimal("2.99")), ("l40s", Decimal("1.19"))]
    first.refresh_from_db()
    assert first.hourly == Decimal("2.49")


def catalog_priced(price: str) -> str:
    return f"""packages:
  - id: "rtx"
    specName: "gpu.rtx"
    cpu: "4"
    memory: "16Gi"
    gpu: 1
    allocation: {{deviceClassName: "nvidia-rtx-3080", count: 1}}
    price: "{price}"
"""


def test_a_yaml_import_that_changes_a_price_records_a_version():
    import_catalog(text=catalog_priced("0.18"))
    plan = import_catalog(text=catalog_priced("0.20"))
    assert [change.fields for _, change in plan.changed] == [
        {"price": (Decimal("0.1800"), Decimal("0.20"))}
    ]
    assert versions("rtx") == [("", Decimal("0.18")), ("", Decimal("0.20"))]


@pytest.mark.parametrize(
    ("prices", "problem"),
    [
        ({"a100": "1.00"}, "not one of the package's alternatives"),
        ({"l40s": "-1"}, "at least 0"),
        ({"l40s": "1.00001"}, "four decimal places"),
        ({"l40s": "cheap"}, "is not a price"),
        ({"l40s": 1.5}, "decimal string"),
        (["l40s"], "must be a mapping"),
    ],
)
def test_alternative_prices_are_checked(prices, problem):
    with pytest.raises(ValidationError) as caught:
        PackageFactory(alternatives=[L40S], alternative_prices=prices)
    assert problem in " ".join(caught.value.message_dict["alternative_prices"])
    assert not Package.objects.exists()


def test_the_ledger_admin_is_read_only_and_reverses_with_a_correction(admin_client):
    unit = UnitFactory(name="billed", package=priced("rtx-2x", "3.60"))
    start = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    held = holding(unit, {"devices": [{"pool": "n", "device": "gpu-0"}]})
    ledger.open_meter(held, at=start)
    closed = ledger.close_meter(unit.uid, at=start + timedelta(minutes=30))
    assert closed is not None
    (record,) = closed.records
    listing = admin_client.get("/admin/billing/usagerecord/")
    assert listing.status_code == 200
    assert b"billed" in listing.content
    assert admin_client.get("/admin/billing/usagerecord/add/").status_code == 403
    change = admin_client.get(f"/admin/billing/usagerecord/{record.pk}/change/")
    assert b"Save" not in change.content  # a view page, nothing to save
    assert admin_client.get("/admin/billing/priceversion/").status_code == 200
    response = admin_client.post(
        "/admin/billing/usagerecord/",
        {"action": "reverse_selected", "_selected_action": [str(record.pk)]},
    )
    assert response.status_code == 302
    correction = UsageRecord.objects.get(corrects=record)
    assert (correction.cost, correction.quantity) == (-record.cost, -record.quantity)
    assert correction.cost == Decimal("-1.800000")
    # Reversing twice adds nothing.
    admin_client.post(
        "/admin/billing/usagerecord/",
        {"action": "reverse_selected", "_selected_action": [str(record.pk)]},
    )
    assert UsageRecord.objects.filter(corrects=record).count() == 1
