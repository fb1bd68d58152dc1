"""The last lines of a unit's log as the unit page shows them: read through runtime.logs, or
why there are none, in words a customer can act on. The text is the customer's program's
output, so the templates escape it; terminal codes are taken out here only to keep it legible."""

from __future__ import annotations

import re
from dataclasses import dataclass

from controlplane.errors import DomainError, NotFound
from controlplane.kube.logs import LogOptions
from runtime import logs
from runtime.models import GPUUnit, UnitPhase

TAIL_LINES = 200
# The log API applies the byte limit after the tail, from its start: a tail longer than this
# loses its newest lines, so the page says so.
LIMIT_BYTES = 256 * 1024
# Colour and cursor sequences (CSI, OSC) and the other control characters a terminal would act
# on; tabs and newlines stay.
TERMINAL_CODES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]"
)


@dataclass(frozen=True)
class LogTail:
    text: str
    lines: int
    cut: bool  # the tail was longer than LIMIT_BYTES: its newest lines are not shown
    problem: str  # why there is no log to show ("" when there is one)
    transient: bool  # the problem may go away by itself (the page keeps asking)


def legible(data: bytes) -> str:
    """The log as text: undecodable bytes replaced, a line a progress bar rewrote with '\\r'
    shown as it last read, terminal codes dropped."""
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
    text = "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n"))
    return TERMINAL_CODES.sub("", text)


def read_tail(unit: GPUUnit) -> LogTail:
    """The unit's last TAIL_LINES lines, or the reason there are none. Never raises for the
    cluster's refusals or its being unreachable: the page shows the reason instead."""
    if unit.at_rest:
        # Known without asking the cluster: a stop deletes the pod, and its log with it.
        return _problem(
            "The unit is stopped: it has no pod, so there is no log (the last pod's went with "
            "it). Start the unit to run it again."
        )
    try:
        data = logs.read(unit, LogOptions(tail_lines=TAIL_LINES, limit_bytes=LIMIT_BYTES))
    except NotFound:
        if unit.phase == UnitPhase.TERMINATED:
            return _problem("The unit is Terminated: its pod, and the log with it, are gone.")
        if unit.phase == UnitPhase.STOPPING:
            return _problem("The unit is stopping: its pod, and the log with it, are gone.")
        return _problem("No log yet: the unit's pod has not been created.", transient=True)
    except logs.LogsUnavailable as error:
        waiting = error.message.removeprefix("no log yet: ")
        return _problem(f"No log yet: the container has not started ({waiting}).", transient=True)
    except DomainError as error:
        return _problem(f"The log cannot be read right now: {error.message}", transient=True)
    cut = len(data) >= LIMIT_BYTES
    if cut:
        data = data[: data.rfind(b"\n") + 1]  # the last line is cut off mid-way
    text = legible(data)
    return LogTail(
        text=text,
        lines=text.count("\n") + (0 if text.endswith("\n") or not text else 1),
        cut=cut,
        problem="",
        transient=False,
    )


def _problem(message: str, *, transient: bool = False) -> LogTail:
    return LogTail(text="", lines=0, cut=False, problem=message, transient=transient)
