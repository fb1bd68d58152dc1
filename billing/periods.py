"""Pure ledger arithmetic: where an interval is cut (UTC hours, price changes), what each
piece costs and its deterministic id. No database, no clock."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Protocol, TypeVar

HOUR = timedelta(hours=1)
# uuid5 namespace of the ledger's record ids (a fixed random UUID: ids are stable forever).
RECORD_NAMESPACE = uuid.UUID("5b0f6a43-2f1e-4a4c-9d8e-5c1f3b7e2a90")
COST_PLACES = Decimal("0.000001")
SECONDS_PLACES = Decimal("0.000001")


class Priced(Protocol):
    effective_from: datetime
    hourly: Decimal


P = TypeVar("P", bound=Priced)


def floor_hour(moment: datetime) -> datetime:
    """The start of the UTC hour `moment` falls in."""
    moment = moment.astimezone(UTC)
    return moment.replace(minute=0, second=0, microsecond=0)


def month_start(moment: datetime) -> datetime:
    """The start of the UTC month `moment` falls in (a usage period's default start)."""
    return floor_hour(moment).replace(day=1, hour=0)


def cost_text(value: Decimal) -> str:
    """A cost as the API writes it: to the micro-unit, no exponent ("5.400000")."""
    return format(value.quantize(COST_PLACES), "f")


def cuts(start: datetime, end: datetime, also: Iterable[datetime] = ()) -> list[datetime]:
    """The instants strictly inside `(start, end)` where a record must end: every UTC hour
    boundary, and each of `also` (price changes) that falls inside."""
    points = set()
    boundary = floor_hour(start) + HOUR
    while boundary < end:
        points.add(boundary)
        boundary += HOUR
    points.update(moment for moment in also if start < moment < end)
    return sorted(points)


def pieces(
    start: datetime, end: datetime, also: Iterable[datetime] = ()
) -> list[tuple[datetime, datetime]]:
    """`[start, end)` as consecutive half-open pieces cut at `cuts`; nothing if it is empty."""
    if end <= start:
        return []
    edges = [start, *cuts(start, end, also), end]
    return list(itertools.pairwise(edges))


def seconds(start: datetime, end: datetime) -> Decimal:
    delta = end - start
    whole = delta.days * 86400 + delta.seconds
    return (Decimal(whole) + Decimal(delta.microseconds) / Decimal(1_000_000)).quantize(
        SECONDS_PLACES
    )


def cost(duration: Decimal, hourly: Decimal) -> Decimal:
    """What `duration` seconds cost at `hourly` per hour, to the micro-unit (half-even)."""
    return (duration * hourly / Decimal(3600)).quantize(COST_PLACES, rounding=ROUND_HALF_EVEN)


def in_force(versions: Sequence[P], at: datetime) -> P | None:
    """The version in force at `at`: the latest that took effect at or before it
    (`versions` sorted by effective_from)."""
    chosen = None
    for version in versions:
        if version.effective_from <= at:
            chosen = version
        else:
            break
    return chosen


def record_id(unit_uid: uuid.UUID | str, claim_uid: str, start: datetime) -> uuid.UUID:
    """The ledger row's id: the same unit, claim and start always give the same id, so an
    export sent twice is recognised by the receiver (Stripe identifier, CloudEvents id)."""
    moment = start.astimezone(UTC).isoformat(timespec="microseconds")
    return uuid.uuid5(RECORD_NAMESPACE, f"{unit_uid}/{claim_uid}/{moment}")


@dataclass(frozen=True)
class Piece:
    start: datetime
    end: datetime
    seconds: Decimal
    quantity: Decimal
    hourly: Decimal
    cost: Decimal
    version: Priced | None


def priced_pieces(
    start: datetime,
    end: datetime,
    *,
    count: int,
    versions: Sequence[P],
    also: Iterable[datetime] = (),
) -> list[Piece]:
    """`[start, end)` cut at UTC hours, price changes and `also` (a reservation's end), each
    piece priced by the version in force at its start (none in force: free). The quantity is
    `count` times its seconds."""
    out = []
    edges = [*(v.effective_from for v in versions), *also]
    for piece_start, piece_end in pieces(start, end, edges):
        version = in_force(versions, piece_start)
        hourly = Decimal(version.hourly) if version is not None else Decimal(0)
        duration = seconds(piece_start, piece_end)
        out.append(
            Piece(
                start=piece_start,
                end=piece_end,
                seconds=duration,
                quantity=duration * count,
                hourly=hourly,
                cost=cost(duration, hourly),
                version=version,
            )
        )
    return out


DAY = timedelta(days=1)
Span = tuple[datetime, datetime]


def floor_day(moment: datetime) -> datetime:
    return floor_hour(moment).replace(hour=0)


def ceil_day(moment: datetime) -> datetime:
    day = floor_day(moment)
    return day if day == moment else day + DAY


def next_month(moment: datetime) -> datetime:
    """The start of the UTC month after the one `moment` falls in."""
    return (month_start(moment) + timedelta(days=32)).replace(day=1)


@dataclass(frozen=True)
class Cover:
    """How a reader sums the ledger rows of a period from rollups: the rows that start in
    `months` and `days` (UTC) lie wholly inside the period and are read as their rollups;
    the rows that start in an `add` span are read one by one and count for their part inside
    the period; the rows that start in a `subtract` span are inside a rollup read whole and
    count for their part outside the period, taken off."""

    months: tuple[datetime, ...] = ()
    days: tuple[datetime, ...] = ()
    add: tuple[Span, ...] = ()
    subtract: tuple[Span, ...] = ()


def cover(start: datetime, end: datetime, *, now: datetime, by_month: bool = True) -> Cover:
    """The rollups and ledger spans that sum the rows of `[start, end)` (rows lie within one
    UTC hour). Whole UTC days (months too, unless `by_month` is false: a reader grouping by
    day) are read as rollups, the hours at either edge row by row. A period that reaches
    `now` reads the day (or month) it ends in as a rollup and takes off the few rows of it
    that start at or after the period's last hour: what has not happened yet has no rows,
    so "this month" costs the same on its first day as on its last."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if end <= start:
        return Cover()
    low = floor_hour(start)
    first_day, last_day = ceil_day(start), floor_day(end)
    add: list[Span] = []
    subtract: list[Span] = []
    days: list[datetime] = []
    if first_day >= end:  # no midnight inside: all of it row by row
        return Cover(add=((low, end),))
    if low < first_day:
        add.append((low, first_day))
    day = first_day
    while day < last_day:
        days.append(day)
        day += DAY
    reaches_now = False
    if end > last_day:
        if end >= now:
            days.append(last_day)
            reaches_now = True
        else:
            add.append((last_day, end))
    months: list[datetime] = []
    if by_month:
        whole = []
        chosen = set(days)
        month = month_start(days[0]) if days else None
        while month is not None and month <= days[-1]:
            following = next_month(month)
            span = {month + DAY * n for n in range((following - month).days)}
            ends_here = reaches_now and month_start(days[-1]) == month
            needed = {d for d in span if d <= days[-1]} if ends_here else span
            if needed <= chosen:
                whole.append(month)
                chosen -= needed
            month = following
        months, days = whole, sorted(chosen)
    if reaches_now:
        bucket_end = last_day + DAY if last_day in days else next_month(last_day)
        subtract.append((floor_hour(end), bucket_end))
    return Cover(months=tuple(months), days=tuple(days), add=tuple(add), subtract=tuple(subtract))
