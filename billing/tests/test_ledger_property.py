"""The ledger's contract, over random lives of units: a unit is billed for the devices its pod
holds, from the time the cluster reports the pod started on them to the time it reports they
were released, whatever the control plane's processes saw when, and whatever their clocks.

A unit's true life is a sequence of pods (p1, p2, ...), each holding its devices over
`[start, end)` in whole seconds, one after the other (a restart: the next pod is created once
the previous one is gone, and starts at or after it ended; gaps allowed). Inside a pod its
container may exit, wait in back-off and be started again by the kubelet, any number of
times: the pod holds its devices throughout (restartPolicy Always). The control plane
sees it through observations made from that truth, delivered to
`metering.settle_meters` (a pod running, pending, its container ended, seen deleted with its
last state, or no pod at all; from the observer or the backstop), to
`metering.close_meters_of_gone_pods` (a watch's DELETED event), to
`metering.settle_unreconciled`, between `ledger.mark_seen` (a reconcile saw the metered pod
running) and `ledger.seal_meters` (beat's hourly seal, its `now` skewed at random). The
processes' clocks are skewed at random too (time-machine): only observed times make
boundaries. Where the ledger reads PostgreSQL's `now()` (a metered pod seen running), the
database's clock reads the time of the observation (lives are set a century ahead, and what
the real clock wrote is moved to that time). Some ends are never observed (the next
observation sees a newer pod, or no pod).

Two units live the same life: the first gets the observations in order, the second the same
plus late duplicates of some of them (delivered after later observations, later pods'
included). Whatever happens:

- a unit's records never overlap (the database refuses it, too: `usage_no_overlap`), and
  each lies within one UTC hour;
- when no end is lost, the records tile exactly the time the pods held their devices: no
  gap, no excess, the same total;
- an end that is lost is estimated: at the next pod's creation when one is seen, else at the
  last time the pod was seen running; no time after that estimate is billed, and the unit's
  timeline says `UsageEndEstimated` for that pod;
- late duplicates never add time: the second unit is never billed for an instant the first
  is not.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import IntegrityError, transaction
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from billing import ledger, periods
from billing.models import Meter, QuantityUnit, UsageRecord
from billing.tests.helpers import claim_of, pod_of, stamp
from catalog.tests.factories import PackageFactory
from runtime.control import metering
from runtime.models import GPUUnit
from runtime.tests.factories import UnitFactory
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

DEVICES = 2
HOUR = 3600
# Kinds of observation, in the order they are delivered when they fall in the same second.
OBSERVATIONS = (
    "pending",
    "running",
    "seen",
    "ended",
    "deleted",
    "gone_pod",
    "nopod",
    "unreconciled",
)
# An end observed as such (the pod's containers' finishedAt or its deletionTimestamp).
END_KINDS = ("ended", "deleted", "gone_pod")
# What the control plane sees once a pod is gone and no end of it was read.
GAP_KINDS = (("nopod", False), ("nopod", True), ("unreconciled", True))
Interval = tuple[int, int]
# Lives are simulated a century ahead: what PostgreSQL's now() writes is before this.
REAL_CLOCK_BEFORE = datetime(2100, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Pod:
    """One pod of the unit, its moments in seconds from the life's origin."""

    index: int
    created: int
    start: int
    end: int
    deleted: int  # removed from the API: end <= deleted <= the next pod's creation
    forced: bool  # deleted before its container's end was recorded: deletionTimestamp only
    # Its container exits at each `exit` (reported terminated for a second, then waiting in
    # back-off) and the kubelet starts it again in the same pod at `restart`: none of that
    # releases the devices.
    exits: tuple[tuple[int, int], ...] = ()

    def container(self, t: int, at: Callable[[int], str], *, final: bool = False) -> dict:
        """Its container's status at `t` as the kubelet reports it (`at` stamps a moment):
        the current state, the last one, the restart count; `final`: ended for good."""
        runs = [self.start, *(restart for _, restart in self.exits)]
        ends = [*(exit_ for exit_, _ in self.exits), self.end]

        def terminated(run: int) -> dict:
            return {"terminated": {"startedAt": at(runs[run]), "finishedAt": at(ends[run])}}

        run = len(runs) - 1 if final else max(i for i, start in enumerate(runs) if start <= t)
        last = run - 1
        if final:
            state = terminated(run)
        elif ends[run] > t:
            state = {"running": {"startedAt": at(runs[run])}}
        elif t < ends[run] + 1:
            state = terminated(run)  # exited; reported so for a second
        else:
            state, last = {"waiting": {"reason": "CrashLoopBackOff"}}, run
        entry = {"name": "main", "restartCount": run, "state": state}
        if last >= 0:
            entry["lastState"] = terminated(last)
        return entry


@dataclass(frozen=True)
class Obs:
    """One delivery at `t` (seconds from the origin) of `kind` about pod `pod` (an index);
    `last`: the pod whose last state rides along (a reconcile that sees a new pod and the old
    one's DELETED event). `slot`: the pod it is delivered among, when not its own."""

    t: int
    pod: int
    kind: str
    last: int | None = None
    backstop: bool = False
    skew: int = 0  # a seal's clock against the truth
    slot: int | None = None

    @property
    def key(self) -> tuple[int, int, int]:
        rank = OBSERVATIONS.index(self.kind) if self.kind in OBSERVATIONS else len(OBSERVATIONS)
        return (self.t, self.slot or self.pod, rank if self.slot is None else len(OBSERVATIONS))


@dataclass
class Life:
    origin: datetime
    pods: list[Pod]
    base: list[Obs]  # in order of delivery
    late: list[tuple[int, Obs]]  # (delivered after base[i], an earlier observation again)
    lost: set[int]  # pods whose end no observation in time says
    closing: dict[int, str]  # a lost end estimated: "replaced" or "last-seen"
    process_skew: int  # the processes' clocks against the truth

    def at(self, t: int) -> datetime:
        return self.origin + timedelta(seconds=t)

    def __str__(self) -> str:
        lines = [
            f"origin {self.origin:%Y-%m-%d %H:%M:%S}, processes' clocks {self.process_skew:+}s"
        ]
        lines += [
            f"p{p.index}: created {p.created}, holds [{p.start}, {p.end}), deleted {p.deleted}"
            + (" (forced)" if p.forced else "")
            + (f", container exits and restarts {list(p.exits)}" if p.exits else "")
            for p in self.pods
        ]
        lines.append(f"ends lost: {sorted(self.lost)} {self.closing}")
        for i, obs in enumerate(self.base):
            lines.append(f"{i:3} {obs.t:6} {obs.kind} p{obs.pod}" + _extra(obs))
            lines += [
                f"    late: {o.t:6} {o.kind} p{o.pod}" + _extra(o) for j, o in self.late if j == i
            ]
        return "\n".join(lines)

    def offset(self, moment: datetime) -> int:
        delta = moment - self.origin
        assert delta % timedelta(seconds=1) == timedelta(0), moment
        return int(delta.total_seconds())


def _extra(obs: Obs) -> str:
    return (
        (f" +last p{obs.last}" if obs.last else "")
        + (" backstop" if obs.backstop else "")
        + (f" skew {obs.skew:+}" if obs.skew else "")
    )


@st.composite
def lives(draw) -> Life:
    origin = draw(
        st.datetimes(min_value=datetime(2131, 3, 30, 21), max_value=datetime(2131, 3, 31, 3))
    ).replace(microsecond=0, tzinfo=UTC)
    pods: list[Pod] = []
    for index in range(1, draw(st.integers(1, 4)) + 1):
        if not pods:
            start = draw(st.integers(0, 120))
            created = start - draw(st.integers(0, 60))
        else:
            previous = pods[-1]
            start = previous.end + draw(st.one_of(st.just(0), st.integers(1, 5400)))
            deleted = previous.end + draw(st.integers(0, start - previous.end))
            created = deleted + draw(st.integers(0, start - deleted))
            pods[-1] = replace(previous, deleted=deleted)
        end = start + draw(st.one_of(st.integers(1, 600), st.integers(601, 3 * HOUR)))
        deleted = end + draw(st.integers(0, 600))
        exits: list[tuple[int, int]] = []
        run_from = start
        for _ in range(draw(st.integers(0, 3))):
            if end - run_from < 3:
                break
            exit_ = draw(st.integers(run_from + 1, end - 2))
            run_from = draw(st.integers(exit_ + 1, min(exit_ + 300, end - 1)))
            exits.append((exit_, run_from))
        pods.append(Pod(index, created, start, end, deleted, draw(st.booleans()), tuple(exits)))

    base: list[Obs] = []
    lost: set[int] = set()
    closing: dict[int, str] = {}
    handed: set[int] = set()  # pods whose first sight carries the previous one's last state
    read_late: set[int] = set()  # pods whose DELETED event is read after the next one is seen
    for pod, after in itertools.zip_longest(pods, pods[1:]):
        during = st.integers(pod.start, pod.end - 1)
        # First seen before its container's second exit: a status shows at most the last two
        # runs' starts, and the first start is what is billed from.
        first_by = pod.exits[1][0] if len(pod.exits) > 1 else pod.end
        base.append(Obs(draw(st.integers(pod.start, first_by - 1)), pod.index, "running"))
        base += [Obs(t, pod.index, "running") for t in draw(st.lists(during, max_size=2))]
        base += [Obs(t, pod.index, "seen") for t in draw(st.lists(during, max_size=2))]
        if pod.created < pod.start:
            waiting = st.integers(pod.created, pod.start - 1)
            base += [Obs(t, pod.index, "pending") for t in draw(st.lists(waiting, max_size=1))]
        until = after.start if after else pod.deleted + HOUR
        base += [
            Obs(t, pod.index, "seal", skew=draw(st.integers(-2 * HOUR, 2 * HOUR)))
            for t in draw(st.lists(st.integers(pod.start, until), max_size=2))
        ]
        # Its end as observed: the container's end (the pod still there), the pod seen
        # deleted, the DELETED event (each possibly more than once), or its last state along
        # the next pod's first sight. None of them: the end is lost.
        ends = sorted(draw(st.lists(st.sampled_from(END_KINDS), max_size=3)), key=END_KINDS.index)
        handover = after is not None and draw(st.booleans())
        limit = after.created if after else pod.deleted + HOUR
        seen_end = pod.end
        for kind in ends:
            low, high = (pod.end, pod.deleted) if kind == "ended" else (pod.deleted, limit)
            seen_end = draw(st.integers(max(low, seen_end), max(high, seen_end)))
            base.append(Obs(seen_end, pod.index, kind))
        # Then, until the next pod is seen: no pod (a relist, the backstop twice, a pass that
        # does not reconcile the unit). None before a handover with no end read, which that
        # would estimate first.
        gap = (
            [] if handover and not ends else draw(st.lists(st.sampled_from(GAP_KINDS), max_size=2))
        )
        low = max(seen_end, pod.deleted)
        times = draw(
            st.lists(st.integers(low, max(low, limit)), min_size=len(gap), max_size=len(gap))
        )
        base += [
            Obs(t, pod.index, kind, backstop=backstop)
            for t, (kind, backstop) in zip(sorted(times), gap, strict=True)
        ]
        if handover:
            handed.add(after.index)
        if after is not None and draw(st.booleans()):
            read_late.add(pod.index)
        if not ends and not handover:
            lost.add(pod.index)
            closing[pod.index] = "replaced" if after else "last-seen"
            missing = False
            for _kind, backstop in gap:
                if not backstop or missing:
                    closing[pod.index] = "last-seen"
                    break
                missing = True

    base.sort(key=lambda obs: obs.key)

    def first_sight(index: int) -> int:
        return next(
            i
            for i, obs in enumerate(base)
            if obs.pod == index and obs.kind in ("pending", "running") and obs.slot is None
        )

    for index in handed:
        first = first_sight(index)
        base[first] = replace(base[first], last=index - 1)
    for index in read_late:
        seen = base[first_sight(index + 1)].t
        t = draw(st.integers(seen, seen + 2 * HOUR))
        base.append(Obs(t, index, "gone_pod", slot=index + 1))
    base.sort(key=lambda obs: obs.key)
    # Late duplicates of observations (not of seals nor of mark_seen), each delivered again
    # some time after the original: after later observations, later pods' included.
    observed = [i for i, obs in enumerate(base) if obs.kind not in ("seal", "seen")]
    late = [
        (draw(st.integers(source, len(base) - 1)), base[source])
        for source in draw(st.lists(st.sampled_from(observed), max_size=4))
    ]
    return Life(
        origin=origin,
        pods=pods,
        base=base,
        late=late,
        lost=lost,
        closing=closing,
        process_skew=draw(st.integers(-3 * 86400, 3 * 86400)),
    )


@dataclass
class Metered:
    """A unit living the life, and the last time the ledger was told each of its pods was
    running while it metered it (by the reconcile that opened its meter or a later one)."""

    unit: GPUUnit
    label: str
    sighted: dict[int, int] = field(default_factory=dict)

    def uid(self, index: int) -> str:
        return f"{self.label}-p{index}"


class Cluster:
    """What the cluster reports about the life's pods, as the given unit's pods."""

    def __init__(self, life: Life) -> None:
        self.life = life
        self.claim = claim_of(DEVICES)

    def _pod(
        self, who: Metered, index: int, t: int, *, ended: bool = False, deleted: bool = False
    ) -> dict:
        pod = self.life.pods[index - 1]
        at = self.life.at
        if deleted and pod.forced:  # its container still running: deletionTimestamp only
            state = pod_of(who.uid(index), at(pod.start), deleted=at(pod.end))
            container = pod.container(pod.end - 1, lambda moment: stamp(at(moment)))
        else:
            finished = at(pod.end) if ended or deleted else None
            state = pod_of(
                who.uid(index),
                at(pod.start),
                finished,
                deleted=at(pod.deleted) if deleted else None,
            )
            container = pod.container(
                t, lambda moment: stamp(at(moment)), final=finished is not None
            )
        state["status"]["containerStatuses"] = [container]
        state["metadata"]["creationTimestamp"] = stamp(at(pod.created))
        return state

    def running(self, who: Metered, index: int, t: int) -> dict:
        return self._pod(who, index, t)

    def pending(self, who: Metered, index: int) -> dict:
        state = self._pod(who, index, self.life.pods[index - 1].start)
        state["status"] = {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}
            ],
        }
        return state

    def ended(self, who: Metered, index: int) -> dict:
        return self._pod(who, index, self.life.pods[index - 1].end, ended=True)

    def last_state(self, who: Metered, index: int) -> dict:
        return self._pod(who, index, self.life.pods[index - 1].end, deleted=True)


def deliver(cluster: Cluster, obs: Obs, to: list[Metered], others: list[Metered]) -> None:
    """Deliver `obs` about the units `to` (`others`: those a pass did not reconcile), the
    database's clock reading the time of the observation."""
    at = cluster.life.at
    uids = [who.unit.uid for who in to]
    if obs.kind == "seal":
        ledger.seal_meters(now=at(obs.t + obs.skew))
    elif obs.kind == "gone_pod":
        metering.close_meters_of_gone_pods([cluster.last_state(who, obs.pod) for who in to])
    elif obs.kind == "unreconciled":
        metering.settle_unreconciled([who.unit for who in others])
    elif obs.kind == "seen":
        metered = ledger.open_meters(uids)
        for who in to:
            if who.unit.uid in metered and metered[who.unit.uid].pod_uid == who.uid(obs.pod):
                ledger.mark_seen([who.unit.uid], at=at(obs.t))
    else:
        observed = []
        for who in to:
            if obs.kind == "running":
                pod = cluster.running(who, obs.pod, obs.t)
            elif obs.kind == "pending":
                pod = cluster.pending(who, obs.pod)
            elif obs.kind == "ended":
                pod = cluster.ended(who, obs.pod)
            else:  # deleted, nopod
                pod = None
            last = obs.pod if obs.kind == "deleted" else obs.last
            last_state = cluster.last_state(who, last) if last is not None else None
            observed.append((who.unit, cluster.claim, pod, last_state))
        metering.settle_meters(observed, backstop=obs.backstop)
    # What PostgreSQL's now() stamped (the real clock, a century before this life) reads as
    # the time of the observation.
    Meter.objects.filter(unit_uid__in=uids, seen_at__lt=REAL_CLOCK_BEFORE).update(seen_at=at(obs.t))
    if obs.kind in ("running", "seen"):
        # The ledger now knows the pod ran at `t`, if it meters it.
        metered = ledger.open_meters(uids)
        for who in to:
            if who.unit.uid in metered and metered[who.unit.uid].pod_uid == who.uid(obs.pod):
                who.sighted[obs.pod] = obs.t


def merged(intervals) -> list[Interval]:
    out: list[Interval] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if out and out[-1][1] >= start:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def within(inner: list[Interval], outer: list[Interval]) -> bool:
    return all(any(a <= start and end <= b for a, b in outer) for start, end in inner)


def billed(life: Life, who: Metered) -> list[Interval]:
    """The unit's records as intervals, each checked: one UTC hour, no overlap."""
    rows = list(
        UsageRecord.objects.filter(unit_uid=who.unit.uid, corrects__isnull=True).order_by("start")
    )
    for row in rows:
        assert row.start < row.end
        assert row.end - periods.floor_hour(row.start) <= periods.HOUR, row
        assert row.seconds == periods.seconds(row.start, row.end)
        assert row.quantity == row.seconds * DEVICES
    for earlier, later in itertools.pairwise(rows):
        assert earlier.end <= later.start, (earlier, later)
    return merged((life.offset(row.start), life.offset(row.end)) for row in rows)


ESTIMATED = re.compile(r"The end of pod (\S+)'s usage is estimated")


def estimated(who: Metered) -> set[int]:
    """The pods whose end the unit's timeline says was estimated."""
    uids = {
        match.group(1)
        for message in who.unit.events.filter(reason="UsageEndEstimated").values_list(
            "message", flat=True
        )
        if (match := ESTIMATED.search(message))
    }
    return {int(uid.rpartition("-p")[2]) for uid in uids}


def live(life: Life) -> tuple[Metered, Metered]:
    """Two units live `life`: the first gets its observations in order, the second also the
    late duplicates. Then whatever is still metered has its pod gone without a trace."""
    Meter.objects.all().delete()  # what an earlier example left open
    tenant = TenantFactory()
    package = PackageFactory(price="2.40")
    first = Metered(UnitFactory(tenant=tenant, package=package), "a")
    second = Metered(UnitFactory(tenant=tenant, package=package), "b")
    cluster = Cluster(life)
    skew = timedelta(seconds=life.process_skew)
    with time_machine.travel(life.at(0) + skew, tick=False) as clock:
        for position, obs in enumerate(life.base):
            clock.move_to(life.at(obs.t) + skew)
            deliver(cluster, obs, [first, second], [])
            for _after, again in (late for late in life.late if late[0] == position):
                deliver(cluster, again, [second], [first])
        drain = Obs(life.base[-1].t + 1, life.pods[-1].index, "nopod")
        clock.move_to(life.at(drain.t) + skew)
        deliver(cluster, drain, [first, second], [])
    assert not Meter.objects.filter(unit_uid__in=[first.unit.uid, second.unit.uid]).exists()
    return first, second


ORIGIN = datetime(2131, 3, 30, 22, 40, tzinfo=UTC)  # 23:00 is t=1200


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(life=lives())
@example(  # An end lost, dated by the next pod's creation; an hour sealed by a fast clock.
    life=Life(
        origin=ORIGIN,
        pods=[Pod(1, -5, 0, 3000, 3010, False), Pod(2, 3100, 3200, 4000, 4010, True)],
        base=[
            Obs(100, 1, "running"),
            Obs(2500, 1, "seen"),
            Obs(2600, 1, "seal", skew=HOUR),
            Obs(3300, 2, "running"),
            Obs(4020, 2, "deleted"),
        ],
        late=[(4, Obs(4020, 2, "deleted")), (4, Obs(3300, 2, "running"))],
        lost={1},
        closing={1: "replaced"},
        process_skew=-86400,
    )
)
@example(  # Seen running only by the reconcile that opened its meter, then gone without a
    # trace: billed until that sighting, [0, 600).
    life=Life(
        origin=ORIGIN,
        pods=[Pod(1, -5, 0, 1800, 1810, False)],
        base=[Obs(600, 1, "running"), Obs(1900, 1, "nopod")],
        late=[],
        lost={1},
        closing={1: "last-seen"},
        process_skew=0,
    )
)
@example(  # A late sight of p1 (its end observed) before p2 is seen: nothing more billed.
    life=Life(
        origin=ORIGIN,
        pods=[Pod(1, -5, 0, 600, 610, False), Pod(2, 1790, 1800, 2400, 2410, False)],
        base=[
            Obs(10, 1, "running"),
            Obs(605, 1, "ended"),
            Obs(615, 1, "deleted"),
            Obs(1810, 2, "running"),
            Obs(2405, 2, "ended"),
        ],
        late=[(2, Obs(10, 1, "running"))],
        lost=set(),
        closing={},
        process_skew=0,
    )
)
@example(  # A late view of the metered pod still Pending, after the backstop found it gone
    # once: not a sighting (a pod does not go back to Pending), so it is closed at its last.
    life=Life(
        origin=datetime(2131, 3, 30, 21, 0, tzinfo=UTC),
        pods=[
            Pod(1, -1, 0, 1, 1, False),
            Pod(2, 1, 1, 2, 2, False),
            Pod(3, 2, 3, 4, 4, False),
            Pod(4, 4, 5, 6, 6, False),
        ],
        base=[
            Obs(-1, 1, "pending"),
            Obs(0, 1, "running"),
            Obs(0, 1, "seen"),
            Obs(0, 1, "seen"),
            Obs(1, 1, "nopod", backstop=True),
            Obs(1, 1, "nopod", backstop=True),
            Obs(1, 2, "running"),
            Obs(3, 3, "running"),
            Obs(5, 4, "running", last=3),
        ],
        late=[(4, Obs(-1, 1, "pending"))],
        lost={1, 2, 4},
        closing={1: "last-seen", 2: "replaced", 4: "last-seen"},
        process_skew=0,
    )
)
@example(  # A container that exits and restarts, its pod replaced at once by the next.
    life=Life(
        origin=datetime(2131, 3, 30, 21, 0, tzinfo=UTC),
        pods=[
            Pod(1, 0, 0, 3, 3, False, ((1, 2),)),
            Pod(2, 3, 3, 4, 4, False),
            Pod(3, 4, 4, 5, 5, False),
        ],
        base=[Obs(0, 1, "running"), Obs(3, 2, "running"), Obs(4, 3, "running")],
        late=[],
        lost={1, 2, 3},
        closing={1: "replaced", 2: "replaced", 3: "last-seen"},
        process_skew=0,
    )
)
def test_the_ledger_bills_what_the_pods_held(life):
    note(str(life))
    first, second = live(life)
    pods = life.pods
    got = billed(life, first)  # no overlap, within UTC hours
    if not life.lost:
        # No end lost: exactly the time the pods held their devices, the same total.
        truth = merged((pod.start, pod.end) for pod in pods)
        assert got == truth, (got, truth)
        rows = UsageRecord.objects.filter(unit_uid=first.unit.uid)
        assert sum(row.seconds for row in rows) == sum(pod.end - pod.start for pod in pods)
    # A lost end is estimated at the next pod's creation, or the last time the ledger was told
    # the pod ran; no time after that is billed, and the timeline says so.
    bound, expected = [], []
    for pod in pods:
        if pod.index not in life.lost:
            end = last = pod.end
        elif life.closing[pod.index] == "replaced":
            end = last = pods[pod.index].created
        else:
            end = first.sighted.get(pod.index, pod.start)
            last = max(
                obs.t
                for obs in life.base
                if obs.pod == pod.index and obs.kind in ("running", "seen")
            )
        bound.append((pod.start, last))
        expected.append((pod.start, end))
    assert within(got, merged(bound)), (got, bound)
    assert got == merged(expected), (got, expected)
    assert estimated(first) == life.lost
    # Late duplicates never add time.
    again = billed(life, second)
    assert within(again, got), (again, got)
    assert estimated(second) >= life.lost


def test_the_database_refuses_overlapping_records_of_a_unit():
    tenant = TenantFactory()
    unit = UnitFactory(tenant=tenant, package=PackageFactory())
    hour = datetime(2131, 3, 30, 22, tzinfo=UTC)

    def record(start: int, end: int, unit_uid=unit.uid) -> UsageRecord:
        seconds = periods.seconds(hour + timedelta(minutes=start), hour + timedelta(minutes=end))
        return UsageRecord(
            id=periods.record_id(unit_uid, "claim-1", hour + timedelta(minutes=start)),
            tenant=tenant,
            unit_uid=unit_uid,
            unit_name=unit.name,
            package_id=unit.package_id,
            claim_uid="claim-1",
            start=hour + timedelta(minutes=start),
            end=hour + timedelta(minutes=end),
            seconds=seconds,
            quantity=seconds,
            quantity_unit=QuantityUnit.DEVICE_SECONDS,
            hourly=Decimal("1.00"),
            currency="USD",
            cost=periods.cost(seconds, Decimal("1.00")),
        )

    first = record(0, 10)
    first.save(force_insert=True)
    record(10, 20).save(force_insert=True)  # adjacent: half-open intervals do not overlap
    record(0, 10, unit_uid=uuid.uuid4()).save(force_insert=True)  # another unit's
    ledger.reverse(first, note="refund")  # a correction covers its record's time
    with pytest.raises(IntegrityError), transaction.atomic():
        record(5, 15).save(force_insert=True)
    assert UsageRecord.objects.filter(unit_uid=unit.uid, corrects__isnull=True).count() == 2
