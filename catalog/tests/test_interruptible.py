"""Packages sold as interruptible (ARCHITECTURE §22): ops mark a package, give it an
interruptible price (at most the on-demand one) and a preemption notice; the catalog YAML
round-trips both only where set, GET /packages shows them, and billing keeps the interruptible
price as versions of its own."""

from __future__ import annotations

from decimal import Decimal

import pytest
import yaml
from django.core.exceptions import ValidationError

from billing import prices
from billing.models import PriceVersion
from catalog.models import Package
from catalog.services import CatalogImportError, export_catalog, import_catalog
from catalog.tests.factories import PackageFactory

pytestmark = pytest.mark.django_db

CATALOG = """\
packages:
  - id: gpu-h100-1x
    specName: gpu.h100.1x
    cpu: "8"
    memory: 64Gi
    gpu: 1
    allocation:
      deviceClassName: nvidia-h100
      count: 1
    price: "3.60"
    interruptible:
      price: "1.20"
      noticeSeconds: 30
  - id: gpu-h100-2x
    specName: gpu.h100.2x
    cpu: "16"
    memory: 128Gi
    gpu: 2
    allocation:
      deviceClassName: nvidia-h100
      count: 2
    price: "7.20"
"""


def test_a_package_is_on_demand_only_unless_ops_mark_it():
    package = PackageFactory()
    assert (package.interruptible, package.preemption_notice_seconds) == (False, 120)


def test_the_interruptible_price_may_not_exceed_the_on_demand_price():
    package = PackageFactory.build(price="1.00", interruptible=True, interruptible_price="1.50")
    with pytest.raises(ValidationError) as raised:
        package.full_clean()
    assert list(raised.value.message_dict) == ["interruptible_price"]
    assert (
        "must not exceed the on-demand price" in raised.value.message_dict["interruptible_price"][0]
    )
    # Not sold as interruptible: the field is not checked against the price.
    PackageFactory.build(price="1.00", interruptible_price="1.50").full_clean()


@pytest.mark.parametrize("notice", [-1, 3601])
def test_a_notice_out_of_range_is_refused(notice):
    package = PackageFactory.build(interruptible=True, preemption_notice_seconds=notice)
    with pytest.raises(ValidationError) as raised:
        package.full_clean()
    assert "preemption_notice_seconds" in raised.value.message_dict


def test_the_catalog_yaml_round_trips_the_interruptible_price_only_where_set():
    import_catalog(text=CATALOG)
    one = Package.objects.get(id="gpu-h100-1x")
    assert (one.interruptible, one.interruptible_price, one.preemption_notice_seconds) == (
        True,
        Decimal("1.2000"),
        30,
    )
    assert Package.objects.get(id="gpu-h100-2x").interruptible is False
    exported = {entry["id"]: entry for entry in yaml.safe_load(export_catalog())["packages"]}
    assert exported["gpu-h100-1x"]["interruptible"] == {"price": "1.20", "noticeSeconds": 30}
    assert "interruptible" not in exported["gpu-h100-2x"]
    plan = import_catalog(text=export_catalog())
    assert (plan.added, plan.changed) == ([], [])


def test_an_import_that_drops_interruptible_stops_selling_it():
    import_catalog(text=CATALOG)
    without = CATALOG.replace(
        '    interruptible:\n      price: "1.20"\n      noticeSeconds: 30\n', ""
    )
    plan = import_catalog(text=without)
    ((_, change),) = plan.changed
    assert change.fields["interruptible"] == (True, False)
    assert Package.objects.get(id="gpu-h100-1x").interruptible is False


@pytest.mark.parametrize(
    ("block", "path"),
    [
        ("    interruptible: yes-please\n", "packages[0].interruptible:"),
        ("    interruptible:\n      noticeSeconds: 30\n", "packages[0].interruptible:"),
        (
            '    interruptible:\n      price: "1.20"\n      discount: 2\n',
            "packages[0].interruptible.discount:",
        ),
        (
            '    interruptible:\n      price: "1.20"\n      noticeSeconds: "30"\n',
            "packages[0].interruptible.noticeSeconds:",
        ),
        ('    interruptible:\n      price: "9.00"\n', "packages[0].interruptible.price:"),
    ],
)
def test_a_bad_interruptible_block_names_its_path_and_imports_nothing(block, path):
    text = CATALOG.replace(
        '    interruptible:\n      price: "1.20"\n      noticeSeconds: 30\n', block, 1
    )
    with pytest.raises(CatalogImportError) as raised:
        import_catalog(text=text)
    assert any(problem.startswith(path) for problem in raised.value.problems), raised.value
    assert not Package.objects.exists()


def test_billing_keeps_the_interruptible_price_as_versions_of_its_own():
    package = PackageFactory(price="3.60", interruptible=True, interruptible_price="1.20")
    versions = {v.alternative: v.hourly for v in PriceVersion.objects.filter(package_id=package.id)}
    assert versions == {"": Decimal("3.60"), prices.INTERRUPTIBLE: Decimal("1.20")}
    package.interruptible_price = Decimal("0.90")
    package.full_clean()
    package.save()
    latest = PriceVersion.objects.filter(
        package_id=package.id, alternative=prices.INTERRUPTIBLE
    ).order_by("-effective_from")
    assert [v.hourly for v in latest] == [Decimal("0.90"), Decimal("1.20")]


def test_get_packages_shows_the_interruptible_offer_or_null(auth_client):
    PackageFactory(
        id="gpu-spot",
        price="3.60",
        interruptible=True,
        interruptible_price="1.20",
        preemption_notice_seconds=45,
    )
    PackageFactory(id="gpu-plain", price="3.60")
    response = auth_client.get("/api/v1/packages")
    assert response.status_code == 200
    offers = {p["id"]: p["interruptible"] for p in response.json()["data"]}
    assert offers == {
        "gpu-spot": {"hourly": "1.20", "currency": "USD", "noticeSeconds": 45},
        "gpu-plain": None,
    }
