"""The metering decision (runtime/control/status.py `meter_step`), pure: what a unit's meter
does given the pod it follows and the pod the cluster shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from billing.tests.helpers import claim_of, pod_of
from runtime.control.status import (
    LAST_SEEN,
    OBSERVED,
    REPLACED,
    MeterStep,
    held_since,
    meter_step,
    released_at,
)

T = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
CLAIM = claim_of(1)


def step(metered: str | None, **kwargs) -> MeterStep:
    defaults = {"pod": None, "last_pod": None, "claim": CLAIM, "missing_before": False}
    return meter_step(metered, **{**defaults, "backstop": False, **kwargs})


def test_a_running_pod_without_a_meter_opens_one_from_its_start():
    assert step(None, pod=pod_of("p1", T)) == MeterStep(open_at=T)
    assert held_since(pod_of("p1", T), None) is None  # no allocated claim: no devices held


def test_the_metered_pod_running_is_seen_and_ended_is_closed_at_its_finish():
    assert step("p1", pod=pod_of("p1", T)) == MeterStep(seen=True)
    ended = pod_of("p1", T, T + timedelta(minutes=5))
    assert step("p1", pod=ended) == MeterStep(
        close=True, close_at=T + timedelta(minutes=5), ended=OBSERVED
    )


def test_a_late_view_of_the_metered_pod_still_pending_is_no_sighting():
    """A pod never goes back to Pending: such a view is from before it ran, and must not
    clear the backstop's finding it gone (it would bill time after its last sighting)."""
    pending = pod_of("p1", T)
    pending["status"] = {"phase": "Pending"}
    assert step("p1", pod=pending, missing_before=True) == MeterStep()
    assert step("p1", pod=pod_of("p1", T), missing_before=True) == MeterStep(seen=True)


def test_a_forced_deletion_ends_at_its_deletion_timestamp():
    gone = pod_of("p1", T, deleted=T + timedelta(minutes=7))
    assert released_at(gone, gone=False) is None
    assert released_at(gone, gone=True) == T + timedelta(minutes=7)


def test_a_newer_pod_dates_the_end_of_the_metered_one_and_an_older_one_is_ignored():
    newer = pod_of("p2", T + timedelta(minutes=30))
    assert step("p1", metered_created=T, pod=newer) == MeterStep(
        close=True, close_at=T + timedelta(minutes=30), ended=REPLACED, open_at=newer_start(newer)
    )
    older = pod_of("p0", T - timedelta(minutes=30))
    assert step("p1", metered_created=T, pod=older) == MeterStep()


def test_a_pod_gone_without_trace_closes_at_last_seen_on_the_backstops_second_sight():
    assert step("p1", backstop=True) == MeterStep(missing=True)
    assert step("p1", backstop=True, missing_before=True) == MeterStep(close=True, ended=LAST_SEEN)
    assert step("p1") == MeterStep(close=True, ended=LAST_SEEN)  # the observer: at once


def newer_start(pod: dict) -> datetime | None:
    return held_since(pod, CLAIM)
