"""The catalog's on-save check of capacity requests against the devices the mirror has seen
of a class (registered into catalog.offers from InventoryConfig.ready)."""

from __future__ import annotations

from typing import Any

from dracel import quantity
from inventory.models import Device

# How many devices of a class are looked at: they are alike within a class in practice.
SAMPLE = 50


def _amount(value: object) -> int | None:
    try:
        return int(quantity.parse(str(value)))
    except (TypeError, ValueError):
        return None


def capacity_problem(device_class: str, capacity: dict[str, Any]) -> str | None:
    """A capacity request no device of the class publishes, or larger than its devices
    allow (their value, or their request policy's maximum). None when the class has no
    device in the mirror yet: nothing is known to check against."""
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
        largest = max(
            _amount(((c.get("requestPolicy") or {}).get("validRange") or {}).get("max"))
            or _amount(c.get("value"))
            or 0
            for c in published
        )
        if wanted is not None and wanted > largest:
            return (
                f"capacity {name} {requested} is more than a device of class {device_class} offers"
            )
    return None
