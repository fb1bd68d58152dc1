"""Regions: GET /regions, `region` on create and on the unit, `regions` on packages, and the
refusals of placement in the API's envelope (database only: placement reads the registry and
the mirror, never the cluster)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from inventory.models import Cluster, InventorySnapshot, PackageAvailability, SyncRun
from runtime.models import GPUUnit, Operation
from tests.endpoints import EndpointTest

pytestmark = pytest.mark.django_db

ORDER = {"operationID": "op-1", "name": "demo", "packageID": ARTICLE_PACKAGE_ID, "image": "x"}


@pytest.fixture
def package():
    return PackageFactory(article=True)


@pytest.fixture
def east():
    """The one enabled cluster, in us-east (the registry's stand-in renamed by ops)."""
    Cluster.objects.all().delete()
    return Cluster.objects.create(name="east-1", region="us-east", display_name="East 1")


def order(client, **extra):
    return client.post("/api/v1/gpu-units", {**ORDER, **extra}, format="json")


def nothing_written():
    return not GPUUnit.objects.exists() and not Operation.objects.exists()


def test_migrate_registers_the_process_cluster(package, auth_client):
    assert list(Cluster.objects.values_list("name", "region", "enabled")) == [
        ("default", "default", True)
    ]
    unit = order(auth_client).json()["data"]
    assert (unit["region"], unit["cluster"]) == ("default", "default")


def test_an_order_lands_in_the_region_it_names(package, east, auth_client):
    response = order(auth_client, region="US-East")
    assert response.status_code == 201, response.json()
    assert (response.json()["data"]["region"], response.json()["data"]["cluster"]) == (
        "us-east",
        "east-1",
    )
    unit = GPUUnit.objects.get()
    assert (unit.region, unit.cluster) == ("us-east", "east-1")
    shown = auth_client.get("/api/v1/gpu-units/demo").json()["data"]
    assert (shown["region"], shown["cluster"]) == ("us-east", "east-1")


def test_a_replay_with_another_region_is_a_conflict(package, east, auth_client):
    assert order(auth_client, region="us-east").status_code == 201
    assert order(auth_client, region="us-east").status_code == 200
    refused = order(auth_client)
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "operation_conflict")


@pytest.mark.parametrize("region", ["eu-west", "Not A Label"])
def test_an_unknown_region_is_a_400_on_the_field(package, east, auth_client, region):
    response = order(auth_client, region=region)
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert "region" in error["details"]["fields"]
    assert nothing_written()


def test_a_package_not_sold_in_the_region_is_a_400(east, auth_client):
    PackageFactory(article=True, regions=["eu-west"])
    response = order(auth_client, region="us-east")
    assert response.status_code == 400, response.json()
    assert "is not sold" in response.json()["error"]["message"]
    assert nothing_written()


def test_a_package_sold_only_where_no_cluster_is_yet_is_unavailable_not_invalid(east, auth_client):
    PackageFactory(article=True, regions=["eu-west"])
    response = order(auth_client)  # no region asked: nothing wrong with the request
    assert response.status_code == 503, response.json()
    assert response.json()["error"]["code"] == "region_unavailable"
    assert response.json()["error"]["details"]["regions"] == ["eu-west"]
    assert nothing_written()


def test_a_cordoned_cluster_takes_no_new_unit(package, east, auth_client):
    Cluster.objects.filter(pk=east.pk).update(cordoned=True)
    response = order(auth_client, region="us-east")
    assert response.status_code == 503, response.json()
    assert response.json()["error"]["code"] == "region_unavailable"
    assert response.json()["error"]["details"]["regions"] == ["us-east"]
    assert response["Retry-After"] == "30"
    assert nothing_written()
    region = auth_client.get("/api/v1/regions").json()["data"][0]
    assert (region["takesUnits"], region["clusters"][0]["cordoned"]) == (False, True)


def test_an_unreachable_cluster_takes_no_new_unit(package, east, auth_client, settings):
    settings.CLUSTER_LOST_AFTER_SECONDS = 60
    long_ago = timezone.now() - timedelta(seconds=61)
    InventorySnapshot.objects.create(cluster="east-1", as_of=long_ago, document="{}")
    SyncRun.objects.create(
        cluster="east-1",
        started_at=timezone.now(),
        finished_at=timezone.now(),
        error="cannot read the cluster",
    )
    response = order(auth_client)
    assert (response.status_code, response.json()["error"]["code"]) == (503, "region_unavailable")
    assert nothing_written()
    region = auth_client.get("/api/v1/regions").json()["data"][0]
    assert region["clusters"][0]["health"] == "unreachable"
    shown = auth_client.get(f"/api/v1/packages/{ARTICLE_PACKAGE_ID}").json()["data"]
    assert shown["regions"] == [{"name": "us-east", "placeableNow": 0, "freeDevices": 0}]
    assert shown["availability"]["reason"] == "no cluster of its regions takes new units now"


def test_a_cluster_whose_listing_failed_only_briefly_still_takes_units(
    package, east, auth_client, settings
):
    settings.CLUSTER_LOST_AFTER_SECONDS = 60
    InventorySnapshot.objects.create(
        cluster="east-1", as_of=timezone.now() - timedelta(seconds=30), document="{}"
    )
    SyncRun.objects.create(
        cluster="east-1", started_at=timezone.now(), finished_at=timezone.now(), error="boom"
    )
    assert order(auth_client).status_code == 201
    assert auth_client.get("/api/v1/regions").json()["data"][0]["clusters"][0]["health"] == (
        "reachable"
    )


class TestRegionList(EndpointTest):
    path = "/api/v1/regions"

    def test_regions_with_their_clusters_and_what_fits(self, auth_client, east):
        PackageFactory(article=True)
        PackageFactory(id="gpu-west-only", spec_name="w", gpu=1, count=1, regions=["eu-west"])
        PackageAvailability.objects.create(
            cluster="east-1", package_id=ARTICLE_PACKAGE_ID, placeable=3, free_devices=6
        )
        as_of = timezone.now()
        InventorySnapshot.objects.create(cluster="east-1", as_of=as_of, document="{}")
        # A disabled cluster is no region yet (nothing is placed there).
        Cluster.objects.create(name="west-1", region="eu-west", enabled=False)
        assert self.get_success_response(auth_client).json()["data"] == [
            {
                "name": "us-east",
                "takesUnits": True,
                "clusters": [
                    {
                        "name": "east-1",
                        "displayName": "East 1",
                        "health": "reachable",
                        "cordoned": False,
                        "asOf": as_of.isoformat().replace("+00:00", "Z"),
                    }
                ],
                "packages": [
                    {"packageID": ARTICLE_PACKAGE_ID, "placeableNow": 3, "freeDevices": 6}
                ],
            }
        ]
        packages = {
            p["id"]: p["regions"] for p in auth_client.get("/api/v1/packages").json()["data"]
        }
        assert packages == {
            ARTICLE_PACKAGE_ID: [{"name": "us-east", "placeableNow": 3, "freeDevices": 6}],
            "gpu-west-only": [],
        }

    def test_regions_need_an_api_key(self, api_client):
        self.get_error_response(api_client, status=401, code="unauthenticated")

    @pytest.mark.parametrize("size", [1, 12])
    def test_statements_are_the_baseline_whatever_the_clusters_and_packages(
        self, auth_client, east, size
    ):
        for index in range(size):
            PackageFactory(id=f"gpu-p{index}", spec_name=f"p{index}", gpu=1, count=1)
            PackageAvailability.objects.create(
                cluster="east-1", package_id=f"gpu-p{index}", placeable=index, free_devices=index
            )
            Cluster.objects.create(name=f"off-{index}", region=f"r-{index}", enabled=False)
        auth_client.get(self.path)  # the key's last-used stamp is written once a minute
        # key + tenant (with its usage counters), packages, the clusters (with the mirror's
        # time and last sync error), their availability
        self.assert_statement_count(auth_client)


def test_units_are_listed_by_region(package, auth_client, tenant):
    Cluster.objects.all().delete()
    Cluster.objects.create(name="east-1", region="us-east")
    assert order(auth_client, operationID="a", name="a").status_code == 201
    Cluster.objects.all().update(enabled=False)
    Cluster.objects.create(name="west-1", region="eu-west")
    assert order(auth_client, operationID="b", name="b").status_code == 201
    listed = auth_client.get("/api/v1/gpu-units", {"region": "EU-West"}).json()
    assert [u["name"] for u in listed["data"]] == ["b"]
    first = auth_client.get("/api/v1/gpu-units", {"region": "us-east", "limit": 1}).json()
    assert [u["name"] for u in first["data"]] == ["a"]
    # A cursor is for the list it came from.
    cursor = auth_client.get("/api/v1/gpu-units", {"limit": 1}).json()["meta"]["nextCursor"]
    refused = auth_client.get("/api/v1/gpu-units", {"region": "us-east", "cursor": cursor})
    assert refused.status_code == 400


@pytest.fixture
def east_and_west(package):
    """Two enabled clusters, each with room for the package in its mirror."""
    Cluster.objects.all().delete()
    for name, region in (("east-1", "us-east"), ("west-1", "eu-west")):
        Cluster.objects.create(name=name, region=region)
        PackageAvailability.objects.create(
            cluster=name, package_id=ARTICLE_PACKAGE_ID, placeable=4, free_devices=8
        )
        InventorySnapshot.objects.create(cluster=name, as_of=timezone.now(), document="{}")


def test_a_region_quota_sends_an_order_where_the_tenant_has_room(
    east_and_west, auth_client, tenant
):
    tenant.quota_regions = {"us-east": 2}
    tenant.save()
    first = order(auth_client, operationID="a", name="a")
    assert first.json()["data"]["region"] == "us-east"  # east first by name: a tie
    # East's two devices are the tenant's whole quota there: the next goes west.
    second = order(auth_client, operationID="b", name="b")
    assert second.json()["data"]["region"] == "eu-west"
    quota = auth_client.get("/api/v1/quota").json()["data"]["regions"]
    assert quota == {"us-east": {"hard": "2", "used": "2", "free": "0"}}
    refused = order(auth_client, operationID="c", name="c", region="us-east")
    assert refused.status_code == 409, refused.json()
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert refused.json()["error"]["details"]["regions"] == ["us-east"]
    assert not GPUUnit.objects.filter(name="c").exists()


def test_no_room_in_any_region_is_a_409_and_nothing_is_written(east_and_west, auth_client, tenant):
    tenant.quota_regions = {"us-east": 1, "eu-west": 0}
    tenant.save()
    refused = order(auth_client)
    assert refused.status_code == 409, refused.json()
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert refused.json()["error"]["details"]["regions"] == ["eu-west", "us-east"]
    assert nothing_written()


def test_a_region_quota_is_a_mapping_of_regions_to_whole_numbers(tenant):
    for bad in ({"EU West": 1}, {"eu-west": -1}, {"eu-west": True}, ["eu-west"]):
        tenant.quota_regions = bad
        with pytest.raises(ValidationError) as refused:
            tenant.full_clean()
        assert "quota_regions" in refused.value.message_dict


def test_orders_between_two_mirror_updates_spill_over_by_what_waits(east_and_west, auth_client):
    """The mirror says each cluster has room for 4 units. Units ordered since, which hold no
    devices yet, are taken off: each order goes to the cluster with the most room left, not all
    to the one the mirror still calls emptiest."""
    placed = []
    for i in range(4):
        response = order(auth_client, operationID=f"o{i}", name=f"u{i}")
        assert response.status_code == 201, response.json()
        placed.append(response.json()["data"]["cluster"])
    # Ties go by name: east first, then wherever more room is left.
    assert placed == ["east-1", "west-1", "east-1", "west-1"]
    # A unit whose devices are allocated is the mirror's to count, not taken off twice.
    GPUUnit.objects.filter(cluster="east-1").update(
        phase="Pending", dra={"claimName": "x", "allocated": True, "devices": []}
    )
    last = order(auth_client, operationID="o4", name="u4")
    assert last.status_code == 201, last.json()
    assert last.json()["data"]["cluster"] == "east-1"
