"""Consumable capacity and shared counters as the structured allocator counts them: what a
request consumes of a device (request policy defaults and rounding), whether it still fits, and
what a device's allocation draws from its pool's counter sets. Pure; quantities are Decimals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from dracel.quantity import format_quantity
from dracel.quantity import parse as parse_quantity

DeviceKey = tuple[str, str, str]
CounterSetKey = tuple[str, str, str]  # (driver, pool, counter set name)


def quantity(value: Any) -> Decimal:
    return parse_quantity(str(value))


@dataclass(frozen=True)
class Consumption:
    """What one allocation takes of a shareable device: per capacity name as the device
    publishes it, the amount and its wire form."""

    amounts: dict[str, Decimal]
    text: dict[str, str]


def _policy_amount(requested: str | None, capacity: Mapping[str, Any]) -> tuple[Decimal, str]:
    """calculateConsumedCapacity: no request → the policy's default, else the whole value; a
    request below validRange.min → min; with a step → rounded up to min + n·step (in whole
    units, the 1.36 integer path); with validValues → the first value not below it."""
    total = str(capacity.get("value", "0"))
    policy = capacity.get("requestPolicy") or {}
    if requested is None:
        default = policy.get("default")
        return (
            (quantity(default), str(default)) if default is not None else (quantity(total), total)
        )
    amount = quantity(requested)
    valid_range = policy.get("validRange")
    if valid_range and valid_range.get("min") is not None:
        low = quantity(valid_range["min"])
        if amount < low:
            return low, str(valid_range["min"])
        step_text = valid_range.get("step")
        if step_text is None:
            return amount, requested
        step = quantity(step_text).to_integral_value(ROUND_CEILING)
        wanted = amount.to_integral_value(ROUND_CEILING)
        base = low.to_integral_value(ROUND_CEILING)
        steps = ((wanted - base) / step).to_integral_value(ROUND_CEILING)
        rounded = base + steps * step
        if rounded == amount:
            return amount, requested
        return rounded, format_quantity(rounded, binary=str(step_text).endswith("i"))
    values = policy.get("validValues")
    if values:
        for value in values:
            if amount <= quantity(value):
                return quantity(value), str(value)
    return amount, requested


def _violates(amount: Decimal, policy: Mapping[str, Any] | None) -> bool:
    if not policy:
        return False
    default = policy.get("default")
    if default is not None and amount == quantity(default):
        return False
    valid_range = policy.get("validRange")
    if valid_range:
        if valid_range.get("max") is not None and amount > quantity(valid_range["max"]):
            return True
        step = valid_range.get("step")
        if step is not None:
            low = quantity(valid_range.get("min") or "0")
            return (
                amount.to_integral_value(ROUND_CEILING) - low.to_integral_value(ROUND_CEILING)
            ) % quantity(step).to_integral_value(ROUND_CEILING) != 0
        return False
    values = policy.get("validValues")
    if values:
        return all(amount != quantity(v) for v in values)
    return False


def _resolve(name: str, driver: str, capacities: Mapping[str, Any]) -> str | None:
    """The device's own key for a requested capacity name: an unqualified name and one
    qualified with the device's driver mean the same capacity."""
    if name in capacities:
        return name
    domain, _, identifier = name.rpartition("/")
    if domain:
        return identifier if domain == driver and identifier in capacities else None
    qualified = f"{driver}/{name}"
    return qualified if qualified in capacities else None


def consumption(
    driver: str, device: Mapping[str, Any], requests: Mapping[str, Any]
) -> Consumption | None:
    """What a request's `capacity.requests` consumes of a shareable device, for every
    capacity it publishes; None when it names a capacity the device lacks or breaks a
    request policy."""
    capacities: Mapping[str, Any] = device.get("capacity") or {}
    wanted: dict[str, str] = {}
    for name, value in requests.items():
        key = _resolve(name, driver, capacities)
        if key is None:
            return None
        wanted[key] = str(value)
    amounts: dict[str, Decimal] = {}
    text: dict[str, str] = {}
    for key, capacity in capacities.items():
        amount, written = _policy_amount(wanted.get(key), capacity)
        if _violates(amount, capacity.get("requestPolicy")):
            return None
        amounts[key], text[key] = amount, written
    return Consumption(amounts, text)


def fits_exclusive(driver: str, device: Mapping[str, Any], requests: Mapping[str, Any]) -> bool:
    """A device allocated whole satisfies capacity requests it has room for."""
    capacities: Mapping[str, Any] = device.get("capacity") or {}
    for name, value in requests.items():
        key = _resolve(name, driver, capacities)
        if key is None or quantity(value) > quantity(capacities[key].get("value", "0")):
            return False
    return True


def device_totals(device: Mapping[str, Any]) -> dict[str, Decimal]:
    return {
        name: quantity(capacity.get("value", "0"))
        for name, capacity in (device.get("capacity") or {}).items()
    }


def counter_draws(device: Mapping[str, Any]) -> dict[str, dict[str, Decimal]]:
    """consumesCounters as {counter set: {counter: amount}}."""
    draws: dict[str, dict[str, Decimal]] = {}
    for entry in device.get("consumesCounters") or []:
        counters = draws.setdefault(str(entry.get("counterSet", "")), {})
        for name, counter in (entry.get("counters") or {}).items():
            counters[name] = counters.get(name, Decimal(0)) + quantity(counter.get("value", "0"))
    return draws


@dataclass
class Usage:
    """What is taken on a cluster's devices: devices held whole, what shares consume of
    shareable ones, and what allocated devices draw from their pools' counter sets (once per
    device, however many shares it has)."""

    exclusive: set[DeviceKey] = field(default_factory=set)
    shared: dict[DeviceKey, dict[str, Decimal]] = field(default_factory=dict)
    counters: dict[CounterSetKey, dict[str, Decimal]] = field(default_factory=dict)
    drawing: set[DeviceKey] = field(default_factory=set)

    def in_use(self, key: DeviceKey) -> bool:
        return key in self.exclusive or key in self.shared

    def add_share(self, key: DeviceKey, amounts: Mapping[str, Decimal]) -> None:
        current = self.shared.setdefault(key, {})
        for name, amount in amounts.items():
            current[name] = current.get(name, Decimal(0)) + amount

    def draw(self, key: DeviceKey, draws: Mapping[str, Mapping[str, Decimal]]) -> None:
        if key in self.drawing:
            return
        self.drawing.add(key)
        for counter_set, counters in draws.items():
            used = self.counters.setdefault((key[0], key[1], counter_set), {})
            for name, amount in counters.items():
                used[name] = used.get(name, Decimal(0)) + amount

    def merge(self, other: Usage) -> None:
        self.exclusive |= other.exclusive
        for key, amounts in other.shared.items():
            self.add_share(key, amounts)
        for counter_key, counters in other.counters.items():
            used = self.counters.setdefault(counter_key, {})
            for name, amount in counters.items():
                used[name] = used.get(name, Decimal(0)) + amount
        self.drawing |= other.drawing
