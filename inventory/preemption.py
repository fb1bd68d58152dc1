"""Which interruptible units give way (ARCHITECTURE §22). Pure: the caller reads the mirror (the
devices a waiting unit could use, node by node, and the interruptible units holding some of
them) and records the answer.

A unit's devices all come from one node, so the answer is one node and the units to preempt
there:

- the fewest units whose devices, with the node's free ones, make what the waiting unit needs;
- among as few, those that serve nothing (Failed, or holding devices with no container
  started) before running ones, then the youngest (the latest started go first), then by uid;
- among nodes, the one needing the fewest, then the one whose victims are youngest, then by
  name: the same inputs always give the same answer.

Nothing is chosen when the unit fits somewhere already (the scheduler places it) or when no node
could fit it even with every interruptible unit gone."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import combinations

# Past this many interruptible units on one node the search keeps to the youngest of them: a
# node has a handful of devices, so this is never reached with whole-device packages.
MAX_CANDIDATES_PER_NODE = 16


@dataclass(frozen=True)
class Holder:
    """An interruptible unit holding devices the waiting unit could use."""

    uid: str
    node: str
    started: datetime
    devices: int  # how many of the devices it holds the waiting unit could use
    serving: bool = True  # Running; False: Failed or stuck, the first to give way


@dataclass(frozen=True)
class Choice:
    node: str
    victims: tuple[Holder, ...]


def _youngest_first(holder: Holder) -> tuple[bool, float, str]:
    """The order holders give way in: those serving nothing first, then the youngest."""
    return (holder.serving, -holder.started.timestamp(), holder.uid)


def _on_node(node: str, deficit: int, holders: list[Holder]) -> Choice | None:
    """The fewest, then first to give way, of `holders` (in that order) covering `deficit`
    devices."""
    holders = holders[:MAX_CANDIDATES_PER_NODE]
    largest = sorted((h.devices for h in holders), reverse=True)
    total, fewest = 0, None
    for count, devices in enumerate(largest, start=1):
        total += devices
        if total >= deficit:
            fewest = count
            break
    if fewest is None:
        return None
    # Combinations come in lexicographic order of positions in the give-way order, so the
    # first that covers the deficit is the first set of that size to give way.
    for chosen in combinations(holders, fewest):
        if sum(h.devices for h in chosen) >= deficit:
            return Choice(node=node, victims=chosen)
    return None  # unreachable: the largest `fewest` cover it


def choose(need: int, free: Mapping[str, int], holders: Iterable[Holder]) -> Choice | None:
    """The node and the interruptible units to preempt there so that `need` devices are free
    on it; None when the unit fits already or cannot fit even so. `free`: the free devices the
    waiting unit could use, by node (nodes with none may be left out)."""
    if any(count >= need for count in free.values()):
        return None
    by_node: dict[str, list[Holder]] = {}
    for holder in sorted(holders, key=_youngest_first):
        if holder.devices > 0:
            by_node.setdefault(holder.node, []).append(holder)
    choices = [
        choice
        for node, on_node in by_node.items()
        if (choice := _on_node(node, need - free.get(node, 0), on_node)) is not None
    ]
    if not choices:
        return None
    return min(
        choices,
        key=lambda c: (len(c.victims), [_youngest_first(v) for v in c.victims], c.node),
    )
