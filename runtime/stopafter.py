"""Auto-stop: the stopAfter a unit gets (what it asked for, within the maximums ops set per
package and per tenant) and when it runs out."""

from __future__ import annotations

from datetime import datetime, timedelta

from catalog import selectors as catalog_selectors
from controlplane.validation import format_duration, parse_duration
from runtime.errors import InvalidRequest
from runtime.models import GPUUnit
from tenancy.models import Tenant


def stop_after_limit(
    tenant: Tenant, package_id: str, *, package_max: str | None = None
) -> tuple[int | None, str]:
    """The longest stopAfter the unit may have (seconds) and who set it, or (None, "").
    `package_max` is the package's own setting when the caller has the package at hand."""
    if package_max is None:
        package_max = catalog_selectors.max_stop_after(package_id)
    limits = []
    for who, value in (
        (f"package {package_id}", package_max),
        (f"tenant {tenant.slug}", tenant.max_stop_after),
    ):
        seconds = parse_duration(value)[0] if value else None
        if seconds is not None:
            limits.append((seconds, who))
    return min(limits) if limits else (None, "")


def effective_stop_after(
    tenant: Tenant, package_id: str, value: str | None, *, package_max: str | None = None
) -> str:
    """The stopAfter a unit gets: the one asked for (400 over the maximum, naming it), else
    the maximum when ops set one, else none ("")."""
    limit, who = stop_after_limit(tenant, package_id, package_max=package_max)
    if value:
        seconds, problem = parse_duration(value)
        if problem or seconds is None:
            raise InvalidRequest(problem or "", details={"fields": {"stopAfter": [problem]}})
        if limit is not None and seconds > limit:
            maximum = format_duration(limit)
            message = f"stopAfter {value} exceeds the maximum of {maximum} set for {who}."
            raise InvalidRequest(
                message,
                details={"fields": {"stopAfter": [message]}, "maximum": maximum, "setBy": who},
            )
        return format_duration(seconds)
    return format_duration(limit) if limit is not None else ""


def stops_at(unit: GPUUnit) -> datetime | None:
    """When a unit started at `started_at` stops by itself (None without stopAfter)."""
    seconds = parse_duration(unit.stop_after)[0] if unit.stop_after else None
    if seconds is None or unit.started_at is None:
        return None
    return unit.started_at + timedelta(seconds=seconds)
