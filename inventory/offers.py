"""The catalog's on-save check of capacity requests against the devices the mirror has seen
of a class (registered into catalog.offers from InventoryConfig.ready)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from dracel import quantity
from inventory.models import Device
from inventory.observe import share_request

# How many devices of a class are looked at: they are alike within a class in practice.
SAMPLE = 50


def _amount(value: object) -> int | None:
    try:
        return int(quantity.parse(str(value)))
    except (TypeError, ValueError):
        return None


def capacity_problem(device_class: str, capacity: dict[str, Any]) -> str | None:
    """A capacity request no device of the class publishes, larger than its devices allow
    (their value, or their request policy's maximum or largest valid value), or one their
    request policy would round up (off its step, between its valid values). None when the
    class has no device in the mirror yet: nothing is known to check against."""
    if not capacity:
        return None
    offers = list(
        Device.objects.filter(device_classes__contains=[device_class]).values_list(
            "capacity", flat=True
        )[:SAMPLE]
    )
    if not offers:
        return None
    for name, requested in capacity.items():
        published = [c[name] for c in offers if isinstance(c.get(name), dict)]
        if not published:
            names = sorted({n for c in offers for n in c})
            return (
                f"no device of class {device_class} publishes capacity {name} "
                f"(its devices have: {', '.join(names) or 'none'})"
            )
        wanted = _amount(requested)
        if wanted is None:
            continue
        policies = [c.get("requestPolicy") or {} for c in published]
        largest = max(
            _amount((policy.get("validRange") or {}).get("max"))
            or max((_amount(v) or 0 for v in policy.get("validValues") or []), default=0)
            or _amount(c.get("value"))
            or 0
            for c, policy in zip(published, policies, strict=True)
        )
        if wanted > largest:
            return (
                f"capacity {name} {requested} is more than a device of class {device_class} offers"
            )
        # The allocator rounds a request up to what the policy hands out (the range's step,
        # the next valid value): the package would then hold more than it says.
        taken = {share_request(policy, wanted) for policy in policies}
        if wanted not in taken:
            given = min(taken)
            binary = any(str(c.get("value", "")).endswith("i") for c in published)
            shown = quantity.format_quantity(Decimal(given), binary=binary)
            return (
                f"capacity {name} {requested} is not an amount devices of class {device_class} "
                f"hand out: the allocator would round it up to {shown}; ask for {shown}"
            )
    return None
