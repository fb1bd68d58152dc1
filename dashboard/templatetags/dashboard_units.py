"""Template filters for how a unit reads on the dashboard's pages."""

from __future__ import annotations

from django import template

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
