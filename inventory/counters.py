"""Shared counters of partitionable devices (KEP-4815: ResourceSlice `sharedCounters`, device
`consumesCounters`) as the scheduler's allocator counts them, and how many units of a package
still fit on a node when devices are taken in the allocator's order. Pure; amounts are Decimals.

A device that nobody holds may still be unplaceable: dynamic MIG publishes every placement of
every profile, and one allocated 7g.80gb draws all of its GPU's memory slices, so no 1g.10gb of
that GPU fits. The kube-scheduler's allocator (k8s.io/dynamic-resource-allocation/structured)
draws a device's counters once when it is allocated and refuses a device whose draws exceed
what its counter sets have left; placing a unit is a first-fit search in publication order
that backs off a choice when the unit's other devices (or its matchAttribute constraint)
cannot follow."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from dracel import quantity

DeviceKey = tuple[str, str, str]  # (driver, pool, device)
SetKey = tuple[str, str, str]  # (driver, pool, counter set)
# What a device draws when allocated: per counter set of its pool, per counter, the amount.
Draws = tuple[tuple[SetKey, tuple[tuple[str, Decimal], ...]], ...]
Counters = dict[SetKey, dict[str, Decimal]]
# Device choices tried per unit before giving up, as the allocator bounds its search per node.
SEARCH_LIMIT = 20_000


@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> Decimal:
    try:
        return quantity.parse(text)
    except ValueError:
        return Decimal(0)


def _amount(value: object) -> Decimal:
    # Thousands of devices publish the same few amounts ("1", "10Gi"): each is parsed once.
    return _parsed(str(value))


def published_counters(counter_set: dict) -> dict[str, str]:
    """A sharedCounters entry's counters as published: {counter: quantity text}."""
    return {
        str(name): str((counter or {}).get("value", "0"))
        for name, counter in (counter_set.get("counters") or {}).items()
    }


def draws_of(driver: str, pool: str, device: dict) -> Draws:
    """consumesCounters as the allocator reads it: amounts summed per counter set and counter
    (a device may name a set more than once)."""
    summed: dict[SetKey, dict[str, Decimal]] = {}
    for entry in device.get("consumesCounters") or []:
        counters = summed.setdefault((driver, pool, str(entry.get("counterSet", ""))), {})
        for name, counter in (entry.get("counters") or {}).items():
            counters[name] = counters.get(name, Decimal(0)) + _amount((counter or {}).get("value"))
    return tuple((key, tuple(counters.items())) for key, counters in summed.items())


@dataclass
class CounterSet:
    """One counter set of a pool: what its slices publish, and what allocated devices draw."""

    driver: str
    pool: str
    name: str
    node_name: str
    published: dict[str, str]
    used: dict[str, Decimal] = field(default_factory=dict)

    @property
    def total(self) -> dict[str, Decimal]:
        return {name: _amount(text) for name, text in self.published.items()}

    def remaining(self) -> dict[str, Decimal]:
        return {
            name: amount - self.used.get(name, Decimal(0)) for name, amount in self.total.items()
        }

    def shown(self) -> dict[str, dict[str, str]]:
        """{counter: {total, remaining}} in the units the set publishes (Gi stays Gi)."""
        left = self.remaining()
        return {
            name: {
                "total": quantity.format_quantity(amount, binary=text.endswith("i")),
                "remaining": quantity.format_quantity(left[name], binary=text.endswith("i")),
            }
            for name, text in sorted(self.published.items())
            for amount in (_amount(text),)
        }


def draw_allocated(
    counter_sets: dict[SetKey, CounterSet], draws: dict[DeviceKey, Draws], held: Iterable[DeviceKey]
) -> None:
    """Charge each allocated device's draws to its counter sets, once per device however many
    claims or shares hold it; a set nobody publishes has nothing to charge."""
    for key in set(held):
        for set_key, counters in draws.get(key, ()):
            found = counter_sets.get(set_key)
            if found is None:
                continue
            for name, amount in counters:
                found.used[name] = found.used.get(name, Decimal(0)) + amount


def _enough(
    set_key: SetKey, counters: tuple[tuple[str, Decimal], ...], remaining: Counters
) -> bool:
    left = remaining.get(set_key)
    return left is not None and all(name in left and left[name] >= a for name, a in counters)


def fits(draws: Draws, remaining: Counters) -> bool:
    """Whether the counter sets have what the device draws; a set or counter that is not
    published is one the device cannot draw on (the allocator refuses it)."""
    return all(_enough(set_key, counters, remaining) for set_key, counters in draws)


def lacking(candidates: Iterable[Candidate], remaining: Counters) -> set[SetKey]:
    """The counter sets that lack (or do not publish) what some of these devices draw."""
    return {
        set_key
        for candidate in candidates
        for set_key, counters in candidate.draws
        if not _enough(set_key, counters, remaining)
    }


def _charge(draws: Draws, remaining: Counters, direction: int) -> None:
    for set_key, counters in draws:
        left = remaining[set_key]
        for name, amount in counters:
            left[name] -= direction * amount


@dataclass(frozen=True)
class Candidate:
    """A free device a package could use, in the allocator's order; `value` is the package's
    matchAttribute value on it (None: the device lacks the attribute)."""

    key: DeviceKey
    draws: Draws
    value: object = None


class _Exhausted(Exception):
    pass


def placeable_units(
    candidates: Sequence[Candidate],
    remaining: Counters,
    *,
    count: int,
    constrained: bool,
    limit: int,
) -> int:
    """Units of `count` devices that fit one after another, at most `limit`: each unit the
    allocator's first fit among the devices still free, its draws then charged to a copy of
    `remaining` (the caller's is left as it was). `constrained`: a unit's devices must agree on
    their `value`. Counters only shrink, so a device that does not fit on its own never fits
    again: the search starts after the leading devices that are taken or can never fit, which
    keeps a node's count linear in its devices when units are alike."""
    if limit <= 0 or count <= 0:
        return 0
    left = {key: dict(counters) for key, counters in remaining.items()}
    taken = [False] * len(candidates)
    start = units = 0
    while units < limit:
        while start < len(candidates) and (
            taken[start]
            or (constrained and candidates[start].value is None)
            or not fits(candidates[start].draws, left)
        ):
            start += 1
        if count == 1:
            # The first device left that fits is the unit: no search.
            chosen = [start] if start < len(candidates) else None
        else:
            try:
                chosen = _first_unit(candidates, taken, start, count, left, constrained)
            except _Exhausted:
                break
        if chosen is None:
            break
        for position in chosen:
            taken[position] = True
            if count == 1:
                _charge(candidates[position].draws, left, 1)
        units += 1
    return units


def _first_unit(
    candidates: Sequence[Candidate],
    taken: list[bool],
    start: int,
    count: int,
    left: Counters,
    constrained: bool,
) -> list[int] | None:
    """The positions of the allocator's first fit for one unit from `start` on, its draws
    charged to `left`; None (and `left` as it was) when no `count` untaken devices fit
    together. Raises _Exhausted after SEARCH_LIMIT choices, as the allocator gives up on a
    node."""
    chosen: list[int] = []
    steps = 0

    def choose(begin: int) -> bool:
        nonlocal steps
        if len(chosen) == count:
            return True
        for position in range(begin, len(candidates)):
            if len(candidates) - position < count - len(chosen):
                return False
            if taken[position]:
                continue
            steps += 1
            if steps > SEARCH_LIMIT:
                raise _Exhausted
            candidate = candidates[position]
            if constrained and (
                candidate.value is None
                or (chosen and candidates[chosen[0]].value != candidate.value)
            ):
                continue
            if not fits(candidate.draws, left):
                continue
            _charge(candidate.draws, left, 1)
            chosen.append(position)
            if choose(position + 1):
                return True
            chosen.pop()
            _charge(candidate.draws, left, -1)
        return False

    return chosen if choose(start) else None
