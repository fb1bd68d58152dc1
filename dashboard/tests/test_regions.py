"""Regions in the dashboard: the order form's region, the unit's region, the packages' regions
and the overview's regions with their clusters' health."""

from __future__ import annotations

import pytest

from catalog.tests.factories import PackageFactory
from dashboard.tests.test_views import NEW, order
from inventory.models import Cluster, PackageAvailability
from runtime.models import GPUUnit, Operation

pytestmark = pytest.mark.django_db


@pytest.fixture
def east():
    Cluster.objects.all().delete()
    return Cluster.objects.create(name="east-1", region="us-east", display_name="East 1")


def test_the_order_form_offers_the_regions_and_places_the_unit_there(member_client, package, east):
    form = member_client.get(NEW).content.decode()
    assert '<option value="" selected>Any region</option>' in form
    assert '<option value="us-east">us-east</option>' in form
    response = order(member_client, region="us-east")
    assert response.status_code == 302
    unit = GPUUnit.objects.get()
    assert (unit.region, unit.cluster) == ("us-east", "east-1")
    page = member_client.get(response["Location"]).content.decode()
    assert "us-east" in page
    assert "cluster east-1" in page


def test_a_region_the_package_is_not_sold_in_is_shown_on_the_field(member_client, east):
    PackageFactory(article=True, regions=["eu-west"])
    response = order(member_client, region="us-east")
    assert response.status_code == 200
    assert "is not sold" in " ".join(response.context["form"].errors["region"])
    assert not GPUUnit.objects.exists()
    assert not Operation.objects.exists()


def test_a_cordoned_region_refuses_the_order_on_the_form(member_client, package, east):
    Cluster.objects.filter(pk=east.pk).update(cordoned=True)
    response = order(member_client)
    assert response.status_code == 200
    assert "takes new units" in response.content.decode()
    assert not GPUUnit.objects.exists()


def test_packages_show_their_regions_and_the_overview_the_clusters(
    member_client, staff_client, package, east
):
    PackageAvailability.objects.create(
        cluster="east-1", package_id=package.id, placeable=2, free_devices=4
    )
    assert "us-east (2)" in member_client.get("/packages/").content.decode()
    overview = member_client.get("/").content.decode()
    assert "taking new units" in overview
    assert "East 1" not in overview  # the clusters are ops' to see
    Cluster.objects.filter(pk=east.pk).update(cordoned=True)
    overview = staff_client.get("/").content.decode()
    assert "not taking new units" in overview
    assert "East 1: unknown, cordoned" in overview
