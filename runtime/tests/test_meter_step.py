"""The metering decision (runtime/control/status.py `meter_step`), pure: what a unit's meter
does given the pod it follows and the pod the cluster shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from billing.tests.helpers import claim_of, pod_of, stamp
from runtime.control.status import (
    LAST_SEEN,
    OBSERVED,
    REPLACED,
    MeterStep,
    held_since,
    holds_idle,
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


# ------------------------------------------- one rule: the pod holds its devices, not a container


def restarted(uid: str, first: datetime, exits: list[datetime], *, waiting: bool = False) -> dict:
    """A running pod whose container started at `first` and exited at each of `exits`, the
    kubelet restarting it in the same pod a second later each time; `waiting`: it is in
    back-off after the last exit instead (CrashLoopBackOff)."""
    pod = pod_of(uid, first)
    starts = [first, *(moment + timedelta(seconds=1) for moment in exits)]
    entry: dict = {"name": "main", "restartCount": len(exits)}
    if exits:
        entry["lastState"] = {
            "terminated": {"startedAt": stamp(starts[-2]), "finishedAt": stamp(exits[-1])}
        }
    if waiting:
        entry["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    else:
        entry["state"] = {"running": {"startedAt": stamp(starts[-1])}}
    pod["status"]["containerStatuses"] = [entry]
    return pod


def test_a_container_that_exits_inside_its_running_pod_ends_nothing():
    exited = pod_of("p1", T)
    exited["status"]["containerStatuses"][0]["state"] = {
        "terminated": {"startedAt": stamp(T), "finishedAt": stamp(T + timedelta(minutes=1))}
    }
    assert released_at(exited, gone=False) is None  # phase Running: restartPolicy Always
    assert step("p1", pod=exited) == MeterStep(seen=True)
    again = restarted("p1", T, [T + timedelta(minutes=1), T + timedelta(minutes=9)])
    assert step("p1", pod=again) == MeterStep(seen=True)
    backing_off = restarted("p1", T, [T + timedelta(minutes=1)], waiting=True)
    assert step("p1", pod=backing_off) == MeterStep(seen=True)


def test_a_pod_first_seen_after_a_restart_is_billed_from_its_first_start():
    once = restarted("p1", T, [T + timedelta(minutes=3)])
    assert step(None, pod=once) == MeterStep(open_at=T)
    crash_looping = restarted("p1", T, [T + timedelta(minutes=3)], waiting=True)
    assert step(None, pod=crash_looping) == MeterStep(open_at=T)


def test_the_ssh_sidecar_starting_first_starts_the_bill():
    """sshd is a restartable init container on the same claim: it holds the devices too, and
    the pod is still Pending while the workload's image is pulled."""
    pod = pod_of("p1", T + timedelta(minutes=2))
    pod["status"]["phase"] = "Pending"
    pod["status"]["containerStatuses"] = [
        {"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}
    ]
    pod["status"]["initContainerStatuses"] = [
        {"name": "ssh", "state": {"running": {"startedAt": stamp(T)}}}
    ]
    assert step(None, pod=pod) == MeterStep(open_at=T)
    assert step("p1", pod=pod) == MeterStep(seen=True)


def test_a_pod_seen_only_once_it_ended_is_billed_for_all_it_held():
    ended = pod_of("p1", T, T + timedelta(minutes=5))
    # Its claim may be deallocated by then: the devices were held while it ran.
    assert step(None, pod=ended, claim=None) == MeterStep(
        open_at=T, open_until=T + timedelta(minutes=5)
    )
    gone = pod_of("p1", T, T + timedelta(minutes=5), deleted=T + timedelta(minutes=6))
    assert step(None, last_pod=gone) == MeterStep(
        open_at=T, open_until=T + timedelta(minutes=5), of_last=True
    )


def test_a_pod_deleted_in_back_off_held_its_devices_until_its_deletion():
    backing_off = restarted("p1", T, [T + timedelta(minutes=1)], waiting=True)
    backing_off["metadata"]["deletionTimestamp"] = stamp(T + timedelta(minutes=20))
    assert released_at(backing_off, gone=True) == T + timedelta(minutes=20)
    assert step("p1", last_pod=backing_off) == MeterStep(
        close=True, close_at=T + timedelta(minutes=20), ended=OBSERVED
    )


def test_a_pod_that_never_started_a_container_holds_nothing():
    pending = pod_of("p1", T)
    pending["status"] = {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
        ],
    }
    assert held_since(pending, CLAIM) is None
    assert step(None, pod=pending) == MeterStep()


def test_a_pod_holds_its_devices_idle_until_a_container_starts():
    pulling = pod_of("p1", T)
    pulling["status"] = {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
        ],
    }
    assert holds_idle(pulling, CLAIM)
    assert not holds_idle(pulling, None)  # no devices allocated: nothing held
    assert not holds_idle(pod_of("p1", T), CLAIM)  # started: held, and billed
    assert not holds_idle(restarted("p1", T, [T + timedelta(minutes=1)], waiting=True), CLAIM)
    assert not holds_idle(pod_of("p1", T, T + timedelta(minutes=1)), CLAIM)  # terminal
