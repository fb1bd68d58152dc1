"""Shared counters of partitionable devices (KEP-4815: ResourceSlice `sharedCounters`, device
`consumesCounters`) as the scheduler's allocator counts them: what each counter set holds and
what allocated devices draw from it. Pure; amounts are Decimals.

A device that nobody holds may still be unplaceable: dynamic MIG publishes every placement of
every profile, and one allocated 7g.80gb draws all of its GPU's memory slices, so no 1g.10gb of
that GPU fits. The allocator (simcluster/allocator.py, after the kube-scheduler's) draws a
device's counters once when it is allocated, however many claims hold it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from dracel import quantity

DeviceKey = tuple[str, str, str]  # (driver, pool, device)
SetKey = tuple[str, str, str]  # (driver, pool, counter set)
# What a device draws when allocated: per counter set of its pool, per counter, the amount.
Draws = tuple[tuple[SetKey, tuple[tuple[str, Decimal], ...]], ...]


def _amount(value: object) -> Decimal:
    try:
        return quantity.parse(str(value))
    except (ValueError, TypeError):
        return Decimal(0)


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
