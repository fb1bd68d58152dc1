"""Choosing the interruptible units that give way (inventory/preemption.py): fewest, then
youngest, then by uid, on one node; pure, so checked against a brute force as well."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from itertools import combinations

from hypothesis import given
from hypothesis import strategies as st

from inventory.preemption import Holder, choose

T0 = datetime(2026, 12, 4, tzinfo=UTC)


def holder(
    uid: str, node: str = "n1", *, minute: int = 0, devices: int = 1, serving: bool = True
) -> Holder:
    return Holder(
        uid=uid,
        node=node,
        started=T0 + timedelta(minutes=minute),
        devices=devices,
        serving=serving,
    )


def uids(choice) -> list[str]:
    return [v.uid for v in choice.victims]


def test_nothing_is_preempted_for_a_unit_that_fits_already():
    assert choose(2, {"n1": 0, "n2": 2}, [holder("a", minute=1)]) is None


def test_the_youngest_give_way_first():
    holders = [holder(f"u{m}", minute=m) for m in range(8)]
    choice = choose(2, {"n1": 0}, holders)
    assert (choice.node, uids(choice)) == ("n1", ["u7", "u6"])


def test_units_that_serve_nothing_give_way_before_running_ones():
    """A Failed or stuck interruptible unit (its pod holds devices, nothing runs) goes first,
    however old; among as few victims only."""
    holders = [
        holder("failed-old", minute=0, serving=False),
        *(holder(f"running-{m}", minute=10 + m) for m in range(3)),
    ]
    assert uids(choose(1, {"n1": 0}, holders)) == ["failed-old"]
    assert uids(choose(2, {"n1": 0}, holders)) == ["failed-old", "running-2"]
    big = [holder("failed-1x", serving=False), holder("running-2x", minute=5, devices=2)]
    assert uids(choose(2, {"n1": 0}, big)) == ["running-2x"]  # fewest first


def test_the_fewest_victims_come_before_the_youngest():
    holders = [holder("old-4x", minute=0, devices=4)] + [
        holder(f"young-{m}", minute=10 + m) for m in range(4)
    ]
    assert uids(choose(4, {"n1": 0}, holders)) == ["old-4x"]


def test_free_devices_on_the_node_count():
    choice = choose(2, {"n1": 1}, [holder("a", minute=1), holder("b", minute=2)])
    assert uids(choice) == ["b"]


def test_the_node_needing_fewest_victims_is_chosen():
    holders = [
        holder("a1", "node-a", minute=5),
        holder("a2", "node-a", minute=6),
        holder("b1", "node-b", minute=1, devices=2),
    ]
    choice = choose(2, {}, holders)
    assert (choice.node, uids(choice)) == ("node-b", ["b1"])


def test_nothing_is_chosen_when_no_node_could_fit_it():
    holders = [holder("a", "n1"), holder("b", "n2")]
    assert choose(2, {"n1": 0, "n2": 0}, holders) is None
    assert choose(3, {}, []) is None


def test_the_same_inputs_always_give_the_same_answer():
    holders = [holder(f"u{i}", f"n{i % 2}", minute=i // 4) for i in range(12)]
    first = choose(3, {"n0": 0, "n1": 0}, holders)
    for seed in range(5):
        shuffled = holders[:]
        random.Random(seed).shuffle(shuffled)
        assert choose(3, {"n0": 0, "n1": 0}, shuffled) == first
    # Both nodes need three: the youngest two of each started together, so their uids decide
    # ("u10" < "u11"), then by uid again among those started a minute earlier.
    assert (first.node, uids(first)) == ("n0", ["u10", "u8", "u4"])


holders_strategy = st.lists(
    st.builds(
        holder,
        uid=st.text("abcdef", min_size=3, max_size=3),
        node=st.sampled_from(["n1", "n2", "n3"]),
        minute=st.integers(0, 5),
        devices=st.integers(1, 4),
        serving=st.booleans(),
    ),
    max_size=8,
    unique_by=lambda h: h.uid,
)


@given(
    need=st.integers(1, 8),
    free=st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.integers(0, 3)),
    holders=holders_strategy,
)
def test_the_choice_is_the_fewest_that_fit_on_some_node(need, free, holders):
    choice = choose(need, free, holders)
    if any(count >= need for count in free.values()):
        assert choice is None
        return
    # Brute force: the fewest holders of one node that make room for the unit there.
    best = None
    for node in {h.node for h in holders}:
        on_node = [h for h in holders if h.node == node]
        for size in range(1, len(on_node) + 1):
            if any(
                sum(h.devices for h in chosen) + free.get(node, 0) >= need
                for chosen in combinations(on_node, size)
            ):
                best = size if best is None else min(best, size)
                break
    if best is None:
        assert choice is None
        return
    assert choice is not None
    assert len(choice.victims) == best
    assert {v.node for v in choice.victims} == {choice.node}
    assert sum(v.devices for v in choice.victims) + free.get(choice.node, 0) >= need
