"""Placement is pure: clusters in, one cluster or a refusal out."""

from __future__ import annotations

import pytest

from inventory.placement import Candidate, Placed, Refused, place

EAST = Candidate("east-1", "us-east", placeable=2, free_devices=4)
EAST_2 = Candidate("east-2", "us-east", placeable=5, free_devices=8)
WEST = Candidate("west-1", "eu-west", placeable=1, free_devices=1)


def test_the_cluster_with_most_room_wins():
    assert place([EAST, EAST_2, WEST], package="p", sold_in=[]) == Placed("east-2", "us-east")


def test_a_region_asked_for_is_kept_to():
    assert place([EAST, EAST_2, WEST], package="p", sold_in=[], region="eu-west") == Placed(
        "west-1", "eu-west"
    )


def test_ties_go_to_the_order_ops_set_then_the_name():
    a = Candidate("b-cluster", "r", position=10, placeable=1)
    b = Candidate("a-cluster", "r", position=20, placeable=1)
    c = Candidate("c-cluster", "r", position=10, placeable=1)
    assert place([b, c, a], package="p", sold_in=[]).cluster == "b-cluster"
    # The same inputs in any order give the same answer.
    assert place([a, b, c], package="p", sold_in=[]).cluster == "b-cluster"


def test_a_full_cluster_spills_into_the_next():
    full = Candidate("east-1", "us-east", placeable=0, free_devices=0, position=1)
    assert place([full, WEST], package="p", sold_in=[]) == Placed("west-1", "eu-west")


@pytest.mark.parametrize(
    ("candidates", "kwargs", "code", "regions"),
    [
        ([EAST, WEST], {"region": "ap-south"}, "unknown_region", ["ap-south"]),
        ([EAST, WEST], {"sold_in": ["ap-south"]}, "region_unavailable", ["ap-south"]),
        ([EAST, WEST], {"sold_in": ["us-east"], "region": "eu-west"}, "not_sold", ["eu-west"]),
        (
            [Candidate("east-1", "us-east", cordoned=True, placeable=3), WEST],
            {"region": "us-east"},
            "region_unavailable",
            ["us-east"],
        ),
        (
            [
                Candidate("east-1", "us-east", unreachable=True),
                Candidate("w", "eu-west", cordoned=True),
            ],
            {},
            "region_unavailable",
            ["eu-west", "us-east"],
        ),
        (
            [Candidate("east-1", "us-east"), Candidate("west-1", "eu-west")],
            {},
            "insufficient_capacity",
            ["eu-west", "us-east"],
        ),
    ],
)
def test_refusals_name_the_regions_tried(candidates, kwargs, code, regions):
    decision = place(candidates, package="p", **{"sold_in": [], **kwargs})
    assert isinstance(decision, Refused)
    assert (decision.code, decision.regions) == (code, regions)


def test_a_package_sold_in_some_regions_is_placed_only_there():
    decision = place([EAST_2, WEST], package="p", sold_in=["eu-west"])
    assert decision == Placed("west-1", "eu-west")


def test_unreachable_and_cordoned_clusters_are_passed_over():
    down = Candidate("east-2", "us-east", unreachable=True, placeable=9)
    cordoned = Candidate("east-3", "us-east", cordoned=True, placeable=9)
    assert place([down, cordoned, EAST], package="p", sold_in=[]) == Placed("east-1", "us-east")


def test_disabled_clusters_are_not_regions():
    off = Candidate("ap-1", "ap-south", enabled=False, placeable=9)
    decision = place([off, EAST], package="p", sold_in=[], region="ap-south")
    assert isinstance(decision, Refused)
    assert decision.code == "unknown_region"


def test_an_unknown_capacity_is_not_a_refusal():
    unsynced = Candidate("east-1", "us-east", known=False)
    full = Candidate("west-1", "eu-west", placeable=0)
    assert place([full, unsynced], package="p", sold_in=[]) == Placed("east-1", "us-east")


def test_with_one_cluster_an_order_it_cannot_place_now_waits_there():
    # As before clusters were registered: Pending in the one cluster, not refused.
    only = Candidate("default", "default", placeable=0)
    assert place([only], package="p", sold_in=[]) == Placed("default", "default")
    cordoned = place([Candidate("default", "default", cordoned=True)], package="p", sold_in=[])
    assert isinstance(cordoned, Refused)
    assert cordoned.code == "region_unavailable"


def test_the_tenants_quota_in_a_region_sends_the_unit_where_it_has_room():
    # East has the most room, but the tenant may hold only 3 more devices there.
    assert place(
        [EAST, EAST_2, WEST], package="p", sold_in=[], devices=4, room={"us-east": 3}
    ) == Placed("west-1", "eu-west")
    # Enough room there (a region not named in the quota is not bounded by it).
    assert place(
        [EAST, EAST_2, WEST], package="p", sold_in=[], devices=2, room={"us-east": 2}
    ) == Placed("east-2", "us-east")


def test_no_room_in_any_region_is_quota_exceeded_naming_them():
    refused = place(
        [EAST, WEST], package="p", sold_in=[], devices=2, room={"us-east": 1, "eu-west": 0}
    )
    assert isinstance(refused, Refused)
    assert (refused.code, refused.regions) == ("quota_exceeded", ["eu-west", "us-east"])
    asked = place(
        [EAST, WEST], package="p", sold_in=[], region="us-east", devices=2, room={"us-east": 0}
    )
    assert isinstance(asked, Refused)
    assert (asked.code, asked.regions) == ("quota_exceeded", ["us-east"])
    assert asked.message.endswith(
        "Delete a unit there, order in another region, or ask us to raise the quota."
    )


def test_a_unit_runs_where_its_storages_live_even_with_more_room_elsewhere():
    assert place([EAST, EAST_2, WEST], package="p", sold_in=[], within={"west-1"}) == Placed(
        "west-1", "eu-west"
    )
    # Full there: no capacity, rather than a cluster without its storages.
    full = Candidate("west-1", "eu-west", placeable=0, free_devices=0)
    refused = place([EAST, full], package="p", sold_in=[], within={"west-1"})
    assert (refused.code, refused.regions) == ("insufficient_capacity", ["eu-west"])
    # What is free, and what to do (issue 43, item 7).
    assert refused.message == (
        'No cluster of region "eu-west" has room for package "p" now: the most free devices of '
        "its kind in one cluster is 0. GET /regions shows where it fits now: order it there, "
        "pick a smaller package, or try again later."
    )


@pytest.mark.parametrize(
    ("within", "region", "regions"),
    [
        ({"west-1"}, "us-east", ["eu-west", "us-east"]),  # its storages are in another region
        ({"gone-1"}, "", []),  # not a cluster that takes part
        (set(), "", []),
    ],
)
def test_a_unit_whose_storages_live_where_it_cannot_run_is_refused(within, region, regions):
    refused = place([EAST, WEST], package="p", sold_in=[], region=region, within=within)
    assert isinstance(refused, Refused)
    assert (refused.code, refused.regions) == ("elsewhere", regions)
