"""A package's regions: DNS labels, stored sorted and once each, round-tripped through the
catalog YAML only when set (so catalogs without them export as before), edited in the admin."""

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.urls import reverse

from catalog.models import Package
from catalog.services import CatalogImportError, export_catalog, import_catalog
from catalog.tests.factories import PackageFactory

pytestmark = pytest.mark.django_db

CATALOG = """\
packages:
  - id: gpu-rtx3080-2x-cpu10-mem40g
    specName: gpu.rtx3080.2x.10c.40g
    cpu: "10"
    memory: 40Gi
    gpu: 2
    allocation:
      deviceClassName: nvidia-rtx-3080
      claimRequestName: gpu
      count: 2
    regions: [us-east, eu-west]
  - id: gpu-rtx3080-1x-cpu5-mem20g
    specName: gpu.rtx3080.1x.5c.20g
    cpu: "5"
    memory: 20Gi
    gpu: 1
    allocation:
      deviceClassName: nvidia-rtx-3080
      claimRequestName: gpu
      count: 1
"""


def test_regions_are_stored_sorted_and_once_each():
    package = PackageFactory(regions=["us-east", "eu-west", "us-east"])
    package.refresh_from_db()
    assert package.regions == ["eu-west", "us-east"]


def test_a_package_without_regions_is_sold_everywhere_by_default():
    package = PackageFactory()
    package.refresh_from_db()
    assert package.regions == []


@pytest.mark.parametrize("region", ["US-East", "us_east", "-east", "east-", "", "a" * 64])
def test_a_region_that_is_not_a_dns_label_is_refused(region):
    package = PackageFactory.build(regions=["us-east", region])
    with pytest.raises(ValidationError) as raised:
        package.full_clean()
    assert list(raised.value.message_dict) == ["regions"]
    assert raised.value.message_dict["regions"][0].startswith("Item 2 in the array")


def test_the_catalog_yaml_round_trips_regions_only_where_set():
    import_catalog(text=CATALOG)
    assert Package.objects.get(id="gpu-rtx3080-2x-cpu10-mem40g").regions == ["eu-west", "us-east"]
    assert Package.objects.get(id="gpu-rtx3080-1x-cpu5-mem20g").regions == []
    exported = yaml.safe_load(export_catalog())["packages"]
    assert [entry.get("regions") for entry in exported] == [None, ["eu-west", "us-east"]]
    assert "regions" not in exported[0]
    plan = import_catalog(text=export_catalog())
    assert (plan.added, plan.changed) == ([], [])


def test_an_import_changes_regions_and_an_empty_list_means_every_region():
    import_catalog(text=CATALOG)
    plan = import_catalog(text=CATALOG.replace("[us-east, eu-west]", "[ap-south]"))
    ((_, change),) = plan.changed
    assert change.fields == {"regions": (["eu-west", "us-east"], ["ap-south"])}
    assert Package.objects.get(id="gpu-rtx3080-2x-cpu10-mem40g").regions == ["ap-south"]

    import_catalog(text=CATALOG.replace("[us-east, eu-west]", "[]"))
    assert Package.objects.get(id="gpu-rtx3080-2x-cpu10-mem40g").regions == []
    assert "regions" not in export_catalog()


def test_listing_the_same_regions_in_another_order_is_no_change():
    import_catalog(text=CATALOG)
    plan = import_catalog(text=CATALOG.replace("[us-east, eu-west]", "[eu-west, us-east, eu-west]"))
    assert plan.changed == []


@pytest.mark.parametrize("value", ['"us-east"', "us-east", "1", "true", "{us-east: 1}"])
def test_regions_that_are_not_a_list_are_a_field_error(value):
    with pytest.raises(CatalogImportError) as caught:
        import_catalog(text=CATALOG.replace("[us-east, eu-west]", value))
    assert caught.value.problems == [
        "packages[0].regions: regions must be a list of region names (strings)."
    ]
    assert not Package.objects.exists()


@pytest.mark.parametrize("value", ["[us-east, 1]", "[true]", "[null]", "[[us-east]]"])
def test_a_region_that_is_not_a_string_is_a_field_error(value):
    with pytest.raises(CatalogImportError) as caught:
        import_catalog(text=CATALOG.replace("[us-east, eu-west]", value))
    assert caught.value.problems == [
        "packages[0].regions: regions must be a list of region names (strings)."
    ]


def test_a_region_that_is_not_a_dns_label_is_a_field_error_naming_it():
    with pytest.raises(CatalogImportError) as caught:
        import_catalog(text=CATALOG.replace("[us-east, eu-west]", "[us-east, EU West]"))
    ((problem,),) = [caught.value.problems]
    assert problem.startswith("packages[0].regions: Item 2 in the array did not validate:")
    assert '"EU West" is not a DNS-1123 label' in problem
    assert not Package.objects.exists()


def test_the_admin_shows_and_saves_regions(admin_client):
    package = PackageFactory(regions=["us-east"])
    url = reverse("admin:catalog_package_change", args=[package.pk])
    page = admin_client.get(url)
    assert 'name="regions"' in page.content.decode()
    form = page.context["adminform"].form
    assert 'value="us-east"' in str(form["regions"])
    data = {
        name: form[name].value() if form[name].value() is not None else "" for name in form.fields
    }
    data.update(
        selectors="\n".join(package.selectors),
        capacity="{}",
        alternatives="[]",
        alternative_prices="{}",
        active="on",
    )

    response = admin_client.post(url, {**data, "regions": "us-east,Bad_Region"})
    assert response.status_code == 200
    assert "regions" in response.context["adminform"].form.errors
    package.refresh_from_db()
    assert package.regions == ["us-east"]

    response = admin_client.post(url, {**data, "regions": "us-east, eu-west,us-east"})
    assert response.status_code == 302
    package.refresh_from_db()
    assert package.regions == ["eu-west", "us-east"]

    assert admin_client.post(url, {**data, "regions": ""}).status_code == 302
    package.refresh_from_db()
    assert package.regions == []


def test_the_admin_list_shows_where_each_package_is_sold(admin_client):
    PackageFactory(id="everywhere")
    PackageFactory(id="two-regions", regions=["us-east", "eu-west"])
    page = admin_client.get(reverse("admin:catalog_package_changelist")).content.decode()
    assert '<td class="field-sold_in">every region</td>' in page
    assert '<td class="field-sold_in">eu-west, us-east</td>' in page
