"""The usage audit: does the ledger bill each unit for exactly the time its timeline says its
pods held devices? The timeline's UsageStarted and UsageEnded entries carry the times the
cluster reported (or the estimate, said so), written as the reconcile observed them; the
ledger's rows (corrections netted out) and open meters are what is billed. Per unit, the time
in one and not the other, within a period, is a difference; differences over a second are
reported (`manage.py audit_usage`, and beat's runtime.audit_usage as a metric)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q

from billing.models import Meter, ReservationUse, UsageRecord
from runtime.models import UnitEvent

Interval = tuple[datetime, datetime]
TOLERANCE = timedelta(seconds=1)


# ---------------------------------------------------------------------------- pure arithmetic


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of half-open intervals as sorted, disjoint ones (empty ones dropped)."""
    out: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def clipped(intervals: Iterable[Interval], start: datetime, end: datetime) -> list[Interval]:
    return merged((max(a, start), min(b, end)) for a, b in intervals)


def length(intervals: Iterable[Interval]) -> timedelta:
    return sum((b - a for a, b in merged(intervals)), timedelta())


def only_in(these: Sequence[Interval], those: Sequence[Interval]) -> timedelta:
    """How much of `these` is not in `those`."""
    these, those = merged(these), merged(those)
    overlap = timedelta()
    for (a, b), (c, d) in itertools.product(these, those):
        if min(b, d) > max(a, c):
            overlap += min(b, d) - max(a, c)
    return length(these) - overlap


def held_intervals(entries: Iterable[tuple[str, datetime]], *, now: datetime) -> list[Interval]:
    """The time held according to a unit's timeline: (reason, observed_at) entries in order,
    each UsageStarted until the next UsageEnded (or now, while it runs)."""
    held: list[Interval] = []
    start: datetime | None = None
    for reason, moment in entries:
        if reason == "UsageStarted":
            start = moment if start is None else start
        elif reason == "UsageEnded" and start is not None:
            held.append((start, moment))
            start = None
    if start is not None:
        held.append((start, now))
    return merged(held)


# ---------------------------------------------------------------------------- the audit


@dataclass(frozen=True)
class Difference:
    unit_uid: str
    unit_name: str
    held: timedelta  # per the timeline, within the period
    billed: timedelta  # per the ledger
    unbilled: timedelta  # held and not billed
    overbilled: timedelta  # billed and not held

    def __str__(self) -> str:
        return (
            f"{self.unit_name} ({self.unit_uid}): held {self.held.total_seconds():.3f} s, "
            f"billed {self.billed.total_seconds():.3f} s; not billed "
            f"{self.unbilled.total_seconds():.3f} s, billed but not held "
            f"{self.overbilled.total_seconds():.3f} s"
        )


def audit(start: datetime, end: datetime, *, now: datetime) -> list[Difference]:
    """Every unit whose billed time in [start, end) differs from its held time by more than
    a second, either way. Three statements, whatever the period."""
    billed: dict[str, list[Interval]] = defaultdict(list)
    names: dict[str, str] = {}
    rows = (
        UsageRecord.objects.filter(start__lt=end, end__gt=start, corrects__isnull=True)
        .filter(correction__isnull=True)  # a reversed row is not billed any more
        # A reservation's unused slot time is no unit's: no pod held anything for it.
        .exclude(reservation_status=ReservationUse.UNUSED)
        .values_list("unit_uid", "unit_name", "start", "end")
    )
    for row_uid, name, a, b in rows:
        billed[str(row_uid)].append((a, b))
        names[str(row_uid)] = name
    for meter in Meter.objects.filter(started_at__lt=end, placeholder=False):
        billed[str(meter.unit_uid)].append((meter.started_at, now))
        names[str(meter.unit_uid)] = meter.unit_name
    entries: dict[str, list[tuple[str, datetime]]] = defaultdict(list)
    events = (
        UnitEvent.objects.filter(
            Q(reason="UsageStarted", observed_at__lt=end) | Q(reason="UsageEnded"),
            observed_at__isnull=False,
        )
        .order_by("unit_id", "observed_at", "id")
        .values_list("unit__uid", "unit__name", "reason", "observed_at")
    )
    for unit_uid, name, reason, moment in events:
        if moment is not None:
            entries[str(unit_uid)].append((reason, moment))
            names.setdefault(str(unit_uid), name)
    differences = []
    for uid in sorted(set(billed) | set(entries)):
        held = clipped(held_intervals(entries.get(uid, []), now=now), start, end)
        paid = clipped(billed.get(uid, []), start, end)
        unbilled, overbilled = only_in(held, paid), only_in(paid, held)
        if unbilled > TOLERANCE or overbilled > TOLERANCE:
            differences.append(
                Difference(uid, names[uid], length(held), length(paid), unbilled, overbilled)
            )
    return differences


# ---------------------------------------------------------------- against the cluster itself


@dataclass(frozen=True)
class PodDifference:
    """A pod the cluster says holds a unit's devices now, and what its meter says instead."""

    unit_uid: str
    unit_name: str
    pod_uid: str
    held_since: datetime  # the pod's first container start, as the cluster reports it
    billed_since: datetime | None  # its meter's start; None: not billed at all
    why: str

    def __str__(self) -> str:
        billed = f"{self.billed_since:%Y-%m-%d %H:%M:%S}" if self.billed_since else "never"
        return (
            f"{self.unit_name} ({self.unit_uid}): pod {self.pod_uid} holds its devices since "
            f"{self.held_since:%Y-%m-%d %H:%M:%S} UTC (the cluster), billed since {billed}: "
            f"{self.why}"
        )


def pod_difference(
    unit_uid: str,
    unit_name: str,
    pod_uid: str,
    held_since: datetime,
    meter: tuple[str, datetime] | None,
) -> PodDifference | None:
    """Pure: a pod that holds devices since `held_since` against the unit's open meter
    (`(pod uid, started_at)`, None for none): unbilled, billing another pod, or from another
    time (over a second)."""
    if meter is None:
        why = "it holds devices and no meter is open"
        return PodDifference(unit_uid, unit_name, pod_uid, held_since, None, why)
    metered_pod, started = meter
    if metered_pod != pod_uid:
        why = f"the open meter follows pod {metered_pod}"
        return PodDifference(unit_uid, unit_name, pod_uid, held_since, started, why)
    if abs(started - held_since) > TOLERANCE:
        why = "the meter starts at another time than the pod's first container"
        return PodDifference(unit_uid, unit_name, pod_uid, held_since, started, why)
    return None


def audit_pods(holding: Iterable[tuple[str, str, str, datetime]]) -> list[PodDifference]:
    """Each (unit uid, unit name, pod uid, held since) the cluster reports holding devices now,
    checked against the open meters: what the timeline-based audit cannot see (a meter closed
    while the pod still holds its devices). One statement."""
    holding = list(holding)
    meters = {
        str(meter.unit_uid): (meter.pod_uid, meter.started_at)
        for meter in Meter.objects.filter(unit_uid__in=[uid for uid, *_ in holding])
    }
    return [
        found
        for uid, name, pod_uid, since in holding
        if (found := pod_difference(uid, name, pod_uid, since, meters.get(uid))) is not None
    ]
