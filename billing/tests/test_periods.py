"""Pure ledger arithmetic: cuts at UTC hours and price changes, costs, deterministic ids."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from billing import periods

T0 = datetime(2026, 11, 30, 22, 40, 15, 500000, tzinfo=UTC)


@dataclass(frozen=True)
class Version:
    effective_from: datetime
    hourly: Decimal


def test_an_interval_is_cut_at_every_utc_hour_and_at_a_price_change():
    end = T0 + timedelta(hours=2, minutes=5)  # 00:45:15.5 the next day
    change = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    pieces = periods.pieces(T0, end, [change])
    assert pieces == [
        (T0, datetime(2026, 11, 30, 23, tzinfo=UTC)),
        (datetime(2026, 11, 30, 23, tzinfo=UTC), change),
        (change, datetime(2026, 12, 1, 0, tzinfo=UTC)),
        (datetime(2026, 12, 1, 0, tzinfo=UTC), end),
    ]


def test_an_interval_in_other_offsets_is_cut_at_utc_hours():
    # 10:20 at +05:30 is 04:50 UTC: the cut is at 05:00 UTC (10:30 there), not at 11:00.
    india = timezone(timedelta(hours=5, minutes=30))
    start = datetime(2026, 12, 1, 10, 20, tzinfo=india)
    assert periods.cuts(start, start + timedelta(minutes=20)) == [
        datetime(2026, 12, 1, 5, tzinfo=UTC)
    ]
    assert periods.floor_hour(start) == datetime(2026, 12, 1, 4, tzinfo=UTC)


def test_empty_and_backwards_intervals_have_no_pieces():
    assert periods.pieces(T0, T0) == []
    assert periods.pieces(T0, T0 - timedelta(seconds=1)) == []


def test_each_piece_is_priced_by_the_version_in_force_at_its_start():
    versions = [
        Version(T0 - timedelta(days=1), Decimal("2.00")),
        Version(datetime(2026, 11, 30, 22, 50, tzinfo=UTC), Decimal("3.60")),
    ]
    end = datetime(2026, 11, 30, 23, 10, tzinfo=UTC)
    got = periods.priced_pieces(T0, end, count=2, versions=versions)
    assert [(p.start, p.end, p.hourly) for p in got] == [
        (T0, versions[1].effective_from, Decimal("2.00")),
        (versions[1].effective_from, datetime(2026, 11, 30, 23, tzinfo=UTC), Decimal("3.60")),
        (datetime(2026, 11, 30, 23, tzinfo=UTC), end, Decimal("3.60")),
    ]
    assert got[0].seconds == Decimal("584.500000")
    assert got[0].quantity == Decimal("1169.000000")  # two devices
    assert got[1].cost == Decimal("0.600000")  # 10 minutes at 3.60/h
    assert got[0].version is versions[0]


def test_time_before_any_price_is_free():
    versions = [Version(T0 + timedelta(minutes=5), Decimal("1.00"))]
    first, second = periods.priced_pieces(
        T0, T0 + timedelta(minutes=10), count=1, versions=versions
    )
    assert (first.version, first.cost) == (None, Decimal(0))
    assert second.hourly == Decimal("1.00")


def test_costs_are_rounded_half_even_to_the_micro_unit():
    assert periods.cost(Decimal("1"), Decimal("0.0018")) == Decimal("0.000000")  # 0.0000005
    assert periods.cost(Decimal("3"), Decimal("0.0018")) == Decimal("0.000002")  # 0.0000015
    assert periods.cost(Decimal("3600"), Decimal("2.49")) == Decimal("2.490000")


def test_record_ids_are_deterministic_and_distinct():
    a = periods.record_id("6f1c", "claim-1", T0)
    assert a == periods.record_id("6f1c", "claim-1", T0.astimezone())
    assert a != periods.record_id("6f1c", "claim-1", T0 + timedelta(microseconds=1))
    assert a != periods.record_id("6f1c", "claim-2", T0)


moments = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC)
)


@given(
    start=moments,
    length=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
    changes=st.lists(moments, max_size=5),
)
def test_pieces_tile_the_interval_each_within_one_hour(start, length, changes):
    end = start + length
    got = periods.pieces(start, end, changes)
    if length == timedelta(0):
        assert got == []
        return
    assert got[0][0] == start
    assert got[-1][1] == end
    for (_, a_end), (b_start, _) in itertools.pairwise(got):
        assert a_end == b_start
    for piece_start, piece_end in got:
        assert piece_start < piece_end
        assert piece_end - periods.floor_hour(piece_start) <= periods.HOUR
    assert sum((periods.seconds(a, b) for a, b in got), Decimal(0)) == periods.seconds(start, end)


def test_a_month_starts_at_its_first_utc_midnight_and_costs_are_written_to_the_micro_unit():
    india = timezone(timedelta(hours=5, minutes=30))
    # 03:00 on 1 December in India is still 30 November in UTC.
    assert periods.month_start(datetime(2026, 12, 1, 3, 0, tzinfo=india)) == datetime(
        2026, 11, 1, tzinfo=UTC
    )
    assert periods.month_start(T0) == datetime(2026, 11, 1, tzinfo=UTC)
    assert periods.cost_text(Decimal("5.4")) == "5.400000"
    assert periods.cost_text(Decimal("-1E-7")) == "-0.000000"
    assert periods.cost_text(Decimal("1E+3")) == "1000.000000"


# ------------------------------------------------------------------ reading through rollups

BASE = datetime(2026, 10, 20, tzinfo=UTC)


def test_this_month_reads_one_month_rollup_and_takes_off_what_starts_after_now():
    now = datetime(2026, 12, 17, 15, 20, tzinfo=UTC)
    plan = periods.cover(periods.month_start(now), now, now=now)
    assert plan == periods.Cover(
        months=(datetime(2026, 12, 1, tzinfo=UTC),),
        subtract=((datetime(2026, 12, 17, 15, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),),
    )


def test_a_period_in_the_past_reads_whole_months_and_days_and_its_edges_row_by_row():
    start = datetime(2026, 10, 30, 6, 30, tzinfo=UTC)
    end = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
    plan = periods.cover(start, end, now=end + timedelta(days=3))
    assert plan.months == (datetime(2026, 11, 1, tzinfo=UTC),)
    assert plan.days == (datetime(2026, 10, 31, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    assert plan.add == (
        (datetime(2026, 10, 30, 6, tzinfo=UTC), datetime(2026, 10, 31, tzinfo=UTC)),
        (datetime(2026, 12, 2, tzinfo=UTC), end),
    )
    assert plan.subtract == ()
    # Grouped by day, no month is read whole.
    assert periods.cover(start, end, now=end + timedelta(days=3), by_month=False).months == ()


def test_a_period_within_one_day_is_read_row_by_row():
    start = datetime(2026, 12, 2, 3, 10, tzinfo=UTC)
    assert periods.cover(start, start + timedelta(hours=5), now=start) == periods.Cover(
        add=((datetime(2026, 12, 2, 3, tzinfo=UTC), start + timedelta(hours=5)),)
    )


@dataclass(frozen=True)
class Row:
    start: datetime
    end: datetime
    cost: Decimal


rows_strategy = st.lists(
    st.tuples(
        st.integers(0, 24 * 80 - 1),  # the hour, from BASE
        st.integers(0, 3599),
        st.integers(1, 3600),
        st.integers(-500_000, 5_000_000),  # micro-units; corrections are negative
    ),
    max_size=40,
)
moment_strategy = st.integers(0, 80 * 24 * 60 - 1).map(lambda m: BASE + timedelta(minutes=m))


def _rows(drawn: list[tuple[int, int, int, int]]) -> list[Row]:
    rows = []
    for hour, offset, length, micros in drawn:
        start = BASE + timedelta(hours=hour, seconds=offset)
        end = min(start + timedelta(seconds=length), BASE + timedelta(hours=hour + 1))
        rows.append(Row(start, end, Decimal(micros) / 1_000_000))
    return rows


def _inside(row: Row, start: datetime, end: datetime) -> Decimal:
    inside = periods.seconds(max(row.start, start), min(row.end, end))
    return inside / periods.seconds(row.start, row.end) if inside > 0 else Decimal(0)


def _part(row: Row, start: datetime, end: datetime) -> Decimal:
    return (row.cost * _inside(row, start, end)).quantize(periods.COST_PLACES)


@given(rows_strategy, moment_strategy, moment_strategy, moment_strategy, st.booleans())
def test_a_cover_sums_exactly_what_the_rows_inside_the_period_cost(
    drawn, first, second, now, by_month
):
    start, end = min(first, second), max(first, second)
    rows = _rows(drawn)
    plan = periods.cover(start, end, now=now, by_month=by_month)
    # What each rollup holds: its rows' whole costs, by the UTC day or month they start in.
    day_sums: dict[datetime, Decimal] = {}
    month_sums: dict[datetime, Decimal] = {}
    for row in rows:
        day = periods.floor_day(row.start)
        day_sums[day] = day_sums.get(day, Decimal(0)) + row.cost
        month = periods.month_start(row.start)
        month_sums[month] = month_sums.get(month, Decimal(0)) + row.cost
    total = sum((month_sums.get(m, Decimal(0)) for m in plan.months), Decimal(0))
    total += sum((day_sums.get(d, Decimal(0)) for d in plan.days), Decimal(0))
    for row in rows:
        if any(a <= row.start < b for a, b in plan.add):
            total += _part(row, start, end)
        if any(a <= row.start < b for a, b in plan.subtract):
            total -= row.cost - _part(row, start, end)
    assert total == sum((_part(row, start, end) for row in rows), Decimal(0))
    # Rollups and added spans never overlap; what is taken off lies in a rollup read.
    buckets = [(d, d + periods.DAY) for d in plan.days]
    buckets += [(m, periods.next_month(m)) for m in plan.months]
    spans = sorted([*plan.add, *buckets])
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert all(any(c <= a and b <= d for c, d in buckets) for a, b in plan.subtract)
