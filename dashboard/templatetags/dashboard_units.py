"""Template filters for how a unit reads on the dashboard's pages."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

from runtime.models import GPUUnit, UnitPhase

register = template.Library()


@register.filter
def reason_beside_phase(unit: GPUUnit) -> str:
    """The unit's reason, or nothing when it only repeats the phase shown beside it (a
    Running unit reports reason Running): "Running  Running" reads as a glitch, not news."""
    if unit.reason.casefold() == unit.phase.casefold():
        return ""
    return unit.reason


@register.filter
def is_terminated(phase: str) -> bool:
    """Terminating or Terminated: the unit's addresses are going or gone."""
    return phase in (UnitPhase.TERMINATING, UnitPhase.TERMINATED)


@register.filter
def seconds_until(stamp: str) -> int:
    """Whole seconds from now until an RFC 3339 time (0 once it has passed; 0 for none)."""
    try:
        moment = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return 0
    return max(0, int((moment - timezone.now()).total_seconds()))


@register.filter
def countdown(seconds: int) -> str:
    """'in 1 minute 40 seconds', 'in 45 seconds', 'now' (as dashboard.js counts it down)."""
    if seconds <= 0:
        return "now"
    minutes, rest = divmod(int(seconds), 60)
    parts = []
    if minutes:
        parts.append(f"{minutes} minute{'' if minutes == 1 else 's'}")
    if rest:
        parts.append(f"{rest} second{'' if rest == 1 else 's'}")
    return "in " + " ".join(parts)
