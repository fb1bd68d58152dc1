"""What a device of a package's class can offer, as a check on save: the inventory (a layer
above the catalog) registers its checker here from its AppConfig, so the catalog never
imports it. Without a registered checker, or before the cluster has been seen, nothing is
refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# checker(device_class, capacity requests) -> a problem, or None
Checker = Callable[[str, dict[str, Any]], "str | None"]
_checkers: list[Checker] = []


def register(checker: Checker) -> None:
    if checker not in _checkers:
        _checkers.append(checker)


# placement(device class, selectors) -> {form field: problem}: the package could never place.
Placement = Callable[[str, list[str]], dict[str, str]]
_placements: list[Placement] = []


def register_placement(checker: Placement) -> None:
    if checker not in _placements:
        _placements.append(checker)


def placement_problems(device_class: str, selectors: list[str]) -> dict[str, str]:
    """Why a unit of a package of `device_class` with `selectors` could never be placed in
    any cluster seen (no such DeviceClass, no device its selectors match), by field; the
    admin refuses an active package for it."""
    problems: dict[str, str] = {}
    for checker in _placements:
        problems |= checker(device_class, selectors)
    return problems


def capacity_problem(device_class: str, capacity: dict[str, Any]) -> str | None:
    """Why no device of `device_class` could give a share of `capacity`, or None."""
    for checker in _checkers:
        if problem := checker(device_class, capacity):
            return problem
    return None
