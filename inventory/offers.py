"""The catalog's on-save checks against what the mirror has seen of the clusters: capacity
requests against a class's devices, and whether a package's class and selectors could place
anywhere (registered into catalog.offers from InventoryConfig.ready)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import dracel
from dracel import quantity
from inventory.models import Device, DeviceClass
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


def placement_problems(device_class: str, selectors: list[str]) -> dict[str, str]:
    """A DeviceClass no cluster has, or selectors that match none of its devices the clusters
    publish (a selector that fails on them, e.g. a string attribute compared with a number,
    named with the device). Nothing when the mirror has seen no class, or no device of the
    class: nothing is known to check against."""
    known = sorted(set(DeviceClass.objects.values_list("name", flat=True)))
    if not known:
        return {}
    if device_class not in known:
        shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
        return {
            "device_class_name": f"No cluster has a DeviceClass named {device_class} (they "
            f"have {shown}): a unit of this package would wait Pending for good. Save it "
            "inactive to prepare it before the class exists."
        }
    if not selectors:
        return {}
    try:
        compiled = [dracel.compile_selector(expression) for expression in selectors]
    except dracel.CelCompileError:
        return {}  # the package's own check says why
    devices = [
        dracel.device_env(driver, {"attributes": attributes, "capacity": capacity})
        for driver, attributes, capacity in Device.objects.filter(
            device_classes__contains=[device_class]
        ).values_list("driver", "attributes", "capacity")[:SAMPLE]
    ]
    if not devices or any(_matches(compiled, env) for env in devices):
        return {}
    # Name the first selector no device passes, and what went wrong on one.
    for number, (expression, selector) in enumerate(zip(selectors, compiled, strict=True), 1):
        failed = ""
        passed = False
        for env in devices:
            try:
                passed = dracel.evaluate(selector, env)
            except dracel.CelRuntimeError as error:
                # Its first sentence: the rest is CEL's general advice.
                failed = failed or str(error).removeprefix("CEL runtime error: ").split(". ")[0]
            if passed:
                break
        if passed:
            continue
        why = (
            f"it cannot be evaluated on them ({failed}: an attribute compared with a value of "
            "another type?)"
            if failed
            else "it is false for every one"
        )
        return {
            "selectors": f"Selector {number} ({expression[:80]}) matches none of the "
            f"{len(devices)} devices of class {device_class} the clusters publish: {why}. A unit "
            "would wait Pending for good; save the package inactive to prepare it before such "
            "devices exist."
        }
    return {
        "selectors": f"The selectors together match none of the {len(devices)} devices of class "
        f"{device_class} the clusters publish: a unit would wait Pending for good."
    }


def _matches(selectors: list[dracel.CompiledSelector], env: dict[str, Any]) -> bool:
    try:
        return dracel.device_selected(selectors, env)
    except dracel.SelectorRuntimeError:
        return False
