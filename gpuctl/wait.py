"""`--wait`: poll a unit until it is where the command asked (Running, Stopped, gone), saying
each phase it passes; give up (exit 8) when it fails, its operation fails, or the deadline
passes. A busy or unreachable API only delays the answer until the deadline."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.client import Client, path
from gpuctl.errors import ApiError, ExitCode, GpuctlError

POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Goal:
    """Where a unit should get to: one of `phases`, at `generation` or later (an update), or
    gone from the API (a deletion)."""

    phases: frozenset[str]
    gone: bool = False
    generation: int = 0

    def reached(self, unit: Mapping[str, Any]) -> bool:
        return (
            unit.get("phase") in self.phases
            and int(unit.get("observedGeneration") or 0) >= self.generation
        )

    def __str__(self) -> str:
        return "deleted" if self.gone else " or ".join(sorted(self.phases))


RUNNING = Goal(frozenset({"Running"}))
STOPPED = Goal(frozenset({"Stopped"}))
GONE = Goal(frozenset({"Terminated"}), gone=True)


def settled(generation: int) -> Goal:
    """An update carried out: the unit at `generation`, running or stopped as it was."""
    return Goal(frozenset({"Running", "Stopped"}), generation=generation)


def until(
    client: Client,
    name: str,
    goal: Goal,
    *,
    timeout: float,
    operation_id: str | None = None,
    report: Callable[[str], None] = lambda line: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Mapping[str, Any] | None:
    """Poll unit `name` until it reaches `goal`; the unit as last seen (None if it was gone
    from the first look)."""
    deadline = clock() + timeout
    seen: Mapping[str, Any] | None = None
    said = ""
    while True:
        try:
            unit = client.get(path("gpu-units", name))
        except ApiError as error:
            if goal.gone and error.status == 404:
                report(f"{name}: gone")
                return seen
            if not error.transient:
                raise
            unit, line = None, f"{name}: the API did not answer ({error.message}); still waiting"
        else:
            seen, line = unit, state(name, unit)
        if line != said:
            report(line)
            said = line
        if unit is not None:
            if goal.reached(unit):
                return unit
            if unit.get("phase") == "Failed":
                raise WaitFailed(f"{name} failed: {detail(unit)}")
        if operation_id:
            _check_operation(client, operation_id)
        if clock() >= deadline:
            where = state(name, seen) if seen else f"{name}: unknown"
            raise WaitFailed(f"gave up after {timeout:g} s waiting for {goal}; {where}")
        sleep(POLL_SECONDS)


class WaitFailed(GpuctlError):
    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=ExitCode.WAIT)


def state(name: str, unit: Mapping[str, Any]) -> str:
    phase, reason = unit.get("phase"), unit.get("reason")
    return f"{name}: {phase}" + (f" ({reason})" if reason and reason != phase else "")


def detail(unit: Mapping[str, Any]) -> str:
    return ": ".join(part for part in (unit.get("reason"), unit.get("message")) if part) or str(
        unit.get("phase")
    )


def _check_operation(client: Client, operation_id: str) -> None:
    try:
        operation = client.get(path("operations", operation_id))
    except ApiError as error:
        if error.transient:
            return
        raise
    if operation.get("status") == "failed":
        why = operation.get("error") or {}
        raise WaitFailed(
            f"operation {operation_id} ({operation.get('kind')}) failed: "
            f"{why.get('code', '')}: {why.get('message', '')}"
        )
