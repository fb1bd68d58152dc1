"""--wait against a scripted API: each phase said once, the goal reached, a failed unit or
operation and the deadline ending the wait (exit 8), a busy API only delaying it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpuctl import wait
from gpuctl.errors import ApiError, ExitCode


class ScriptedClient:
    """Answers GET /gpu-units/{name} from `units` in turn (the last one again once they run
    out) and GET /operations/{id} with `operation`; an ApiError in the script is raised."""

    def __init__(self, units: list[Any], operation: dict | None = None) -> None:
        self.units = units
        self.operation = operation or {"status": "running", "kind": "create"}
        self.asked: list[str] = []

    def get(self, route: str) -> Any:
        self.asked.append(route)
        if route.startswith("/operations/"):
            return self.operation
        answer = self.units.pop(0) if len(self.units) > 1 else self.units[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def unit(phase: str, reason: str = "", **extra: Any) -> dict:
    return {"name": "u", "phase": phase, "reason": reason, "message": "", **extra}


def until(client: ScriptedClient, goal: wait.Goal, **options: Any) -> tuple[Any, list[str]]:
    said: list[str] = []
    clock = Clock()
    report: Callable[[str], None] = said.append
    found = wait.until(
        client,
        "u",
        goal,
        report=report,
        clock=clock,
        sleep=clock.sleep,
        **{"timeout": 30, **options},
    )
    return found, said


def test_it_says_each_phase_once_and_returns_the_unit_that_got_there():
    client = ScriptedClient(
        [
            unit("Provisioning"),
            unit("Pending", "WaitingForAllocation"),
            unit("Pending", "WaitingForAllocation"),
            unit("Running", observedGeneration=1),
        ]
    )
    found, said = until(client, wait.RUNNING, operation_id="op-1")
    assert found["phase"] == "Running"
    assert said == ["u: Provisioning", "u: Pending (WaitingForAllocation)", "u: Running"]
    assert "/operations/op-1" in client.asked


def test_a_failed_unit_ends_the_wait_with_its_reason():
    client = ScriptedClient(
        [unit("Provisioning"), {**unit("Failed", "ImagePullFailed"), "message": "no such image"}]
    )
    with pytest.raises(wait.WaitFailed) as raised:
        until(client, wait.RUNNING)
    assert raised.value.exit_code == ExitCode.WAIT
    assert raised.value.message == "u failed: ImagePullFailed: no such image"


def test_a_failed_operation_ends_the_wait():
    failed = {
        "status": "failed",
        "kind": "stop",
        "error": {"code": "gave_up", "message": "tried 20 times"},
    }
    client = ScriptedClient([unit("Stopping")], operation=failed)
    with pytest.raises(
        wait.WaitFailed, match="operation op-2 \\(stop\\) failed: gave_up: tried 20"
    ):
        until(client, wait.STOPPED, operation_id="op-2")


def test_the_deadline_ends_the_wait_saying_where_the_unit_is():
    client = ScriptedClient([unit("Pending", "NoMatchingDevices")])
    with pytest.raises(wait.WaitFailed) as raised:
        until(client, wait.RUNNING, timeout=5)
    assert raised.value.message == (
        "gave up after 5 s waiting for Running; u: Pending (NoMatchingDevices)"
    )


def test_a_busy_or_unreachable_api_delays_the_answer_but_a_refusal_does_not():
    busy = ApiError(503, "service_unavailable", "briefly unavailable")
    client = ScriptedClient([busy, ApiError(0, "unreachable", "down"), unit("Running")])
    found, said = until(client, wait.RUNNING)
    assert found["phase"] == "Running"
    assert said[0] == "u: the API did not answer (briefly unavailable); still waiting"
    with pytest.raises(ApiError):
        until(ScriptedClient([ApiError(401, "unauthenticated", "no")]), wait.RUNNING)


def test_a_deletion_is_done_when_the_unit_is_gone_and_returns_it_as_last_seen():
    gone = ApiError(404, "not_found", "gpu unit u not found.")
    found, said = until(ScriptedClient([unit("Terminating"), gone]), wait.GONE)
    assert found["phase"] == "Terminating"
    assert said == ["u: Terminating", "u: gone"]
    with pytest.raises(ApiError):  # only a deletion takes a 404 for an answer
        until(ScriptedClient([gone]), wait.RUNNING)


def test_an_update_waits_for_its_generation():
    client = ScriptedClient(
        [
            unit("Running", generation=3, observedGeneration=2),
            unit("Running", generation=3, observedGeneration=3),
        ]
    )
    found, _ = until(client, wait.settled(3))
    assert found["observedGeneration"] == 3
