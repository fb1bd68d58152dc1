"""The overview's charts as plain geometry: sync samples (utilisation) or cost per package and
day (usage) in, SVG coordinates and labels out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from dashboard import money

# Two shapes of the same chart: wide for laptops, narrow for phones (CSS shows one), so the
# labels keep a readable size when the SVG scales to the screen.
WIDE = (900, 260)
NARROW = (360, 220)
# Room for the y labels on the left and the time labels at the bottom.
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 28


@dataclass(frozen=True)
class Sample:
    at: datetime
    allocated: int
    total: int


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float
    allocated_line: str
    allocated_area: str
    capacity_line: str
    last_point: tuple[float, float] | None
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    summary: str

    @property
    def empty(self) -> bool:
        return self.last_point is None


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def utilisation_chart(
    samples: Sequence[Sample], *, width: int = WIDE[0], height: int = WIDE[1]
) -> Chart:
    """Allocated devices (line and area) against capacity (dashed) over the sync history;
    `samples` in time order."""
    left, right, top, bottom = LEFT, width - RIGHT, TOP, height - BOTTOM
    if not samples:
        return Chart(width, height, left, right, top, bottom, "", "", "", None, [], [], "")
    peak = max(max(s.total, s.allocated) for s in samples) or 1
    start, end = samples[0].at, samples[-1].at
    span = (end - start).total_seconds()

    def x(at: datetime) -> float:
        if span <= 0:
            return right
        return left + (right - left) * (at - start).total_seconds() / span

    def y(value: int) -> float:
        return bottom - (bottom - top) * value / peak

    allocated = [(x(s.at), y(s.allocated)) for s in samples]
    capacity = [(x(s.at), y(s.total)) for s in samples]
    if len(samples) == 1:
        # One sample still reads as a level: draw it across the whole plot.
        allocated = [(left, allocated[0][1]), (right, allocated[0][1])]
        capacity = [(left, capacity[0][1]), (right, capacity[0][1])]

    def polyline(points: list[tuple[float, float]]) -> str:
        return " ".join(f"{_fmt(px)},{_fmt(py)}" for px, py in points)

    area = [(allocated[0][0], bottom), *allocated, (allocated[-1][0], bottom)]
    levels = sorted({0, peak // 2, peak})
    y_ticks = [Tick(y(level), str(level)) for level in levels]
    x_ticks = [Tick(left, f"{start:%H:%M:%S}")]
    if span > 0:
        x_ticks.append(Tick(right, f"{end:%H:%M:%S}"))
    latest = samples[-1]
    busiest = max(samples, key=lambda s: s.allocated)
    summary = (
        f"{len(samples)} inventory syncs from {start:%H:%M:%S} to {end:%H:%M:%S} UTC: "
        f"{latest.allocated} of {latest.total} devices allocated now, "
        f"at most {busiest.allocated} at {busiest.at:%H:%M:%S}."
    )
    return Chart(
        width=width,
        height=height,
        plot_left=left,
        plot_right=right,
        plot_top=top,
        plot_bottom=bottom,
        allocated_line=polyline(allocated),
        allocated_area=polyline(area),
        capacity_line=polyline(capacity),
        last_point=allocated[-1],
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        summary=summary,
    )


# Usage bars: room for the axis's unit above the plot, and for money labels on the left.
USAGE_TOP, USAGE_BOTTOM, USAGE_RIGHT = 30, 28, 16
# Approximate advance of one axis character (12px system sans), to fit the y labels.
AXIS_CHAR = 7
# Colours of the package series (dashboard.css .series-<n>); beyond them they repeat, and the
# legend and the table still tell the packages apart.
SERIES_COLOURS = 8
DAY_LABEL_EVERY = 7  # a label a week, counted back from the last day


@dataclass(frozen=True)
class Segment:
    """One package's part of a day's bar."""

    package: str
    series: int
    y: float
    height: float
    cost: Decimal
    label: str


@dataclass(frozen=True)
class Bar:
    day: date
    x: float
    width: float
    total: Decimal
    segments: list[Segment]


@dataclass(frozen=True)
class Series:
    package: str
    colour: int
    total: Decimal


@dataclass(frozen=True)
class DayRow:
    """A line of the chart's table: a day with any usage, its cost per package (in the order
    of the series) and in all."""

    day: date
    costs: list[Decimal]
    total: Decimal


@dataclass(frozen=True)
class UsageChart:
    width: int
    height: int
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float
    currency: str
    bars: list[Bar]
    series: list[Series]
    rows: list[DayRow]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    total: Decimal
    summary: str

    @property
    def empty(self) -> bool:
        return not any(bar.segments for bar in self.bars)


def day_label(day: date) -> str:
    return f"{day.day} {day:%b}"


def nice_step(span: Decimal) -> Decimal:
    """A round step (1, 2, 2.5 or 5 times a power of ten) of about a quarter of `span`, so
    the axis reads in round money."""
    raw = span / 4
    power = Decimal(10) ** math.floor(math.log10(raw))
    for factor in (Decimal(1), Decimal(2), Decimal("2.5"), Decimal(5), Decimal(10)):
        if raw <= factor * power:
            return (factor * power).normalize()
    return (10 * power).normalize()  # pragma: no cover: raw / power < 10 by construction


def _tick_label(value: Decimal, step: Decimal) -> str:
    if step == step.to_integral_value():
        return f"{value:.0f}"
    places = max(2, -step.as_tuple().exponent)  # type: ignore[operator]
    return f"{value:.{places}f}"


def usage_chart(
    costs: Mapping[tuple[str, date], Decimal],
    *,
    last_day: date,
    days: int = 30,
    currency: str,
    width: int = WIDE[0],
    height: int = WIDE[1],
) -> UsageChart:
    """Cost per day over the `days` days up to `last_day`, a bar a day stacked by package
    (packages in ID order, bottom up); `costs` keyed (package ID, day) as the ledger's
    package-day usage gives them. Days outside the range are left out; a net negative
    figure (a correction) draws nothing but stays in the table."""
    first_day = last_day - timedelta(days=days - 1)
    window = {key: cost for key, cost in costs.items() if first_day <= key[1] <= last_day}
    by_package: dict[str, Decimal] = {}
    drawn = {first_day + timedelta(days=offset): Decimal(0) for offset in range(days)}
    for (package, day), cost in window.items():
        by_package[package] = by_package.get(package, Decimal(0)) + cost
        drawn[day] += max(cost, Decimal(0))
    series = [
        Series(package, index % SERIES_COLOURS, by_package[package])
        for index, package in enumerate(sorted(by_package))
    ]
    peak = max(drawn.values())
    step = nice_step(peak) if peak > 0 else Decimal(1)
    top_value = step * math.ceil(peak / step) if peak > 0 else step
    levels = [step * n for n in range(int(top_value / step) + 1)]
    labels = [_tick_label(level, step) for level in levels]
    left = 10 + AXIS_CHAR * max(len(label) for label in labels)
    right, top, bottom = width - USAGE_RIGHT, USAGE_TOP, height - USAGE_BOTTOM
    slot = (right - left) / days
    scale = (bottom - top) / float(top_value)

    def y(value: Decimal) -> float:
        return bottom - float(value) * scale

    bars = []
    for offset in range(days):
        day = first_day + timedelta(days=offset)
        segments = []
        stacked = Decimal(0)
        for line in series:
            cost = window.get((line.package, day), Decimal(0))
            if cost <= 0:
                continue
            segments.append(
                Segment(
                    package=line.package,
                    series=line.colour,
                    y=y(stacked + cost),
                    height=float(cost) * scale,
                    cost=cost,
                    label=f"{line.package} on {day_label(day)}: {money.display(cost, currency)}",
                )
            )
            stacked += cost
        bars.append(
            Bar(
                day=day,
                x=left + slot * offset + slot * 0.15,
                width=slot * 0.7,
                total=drawn[day],
                segments=segments,
            )
        )
    rows = []
    for day in sorted({d for _, d in window}):
        figures = [window.get((line.package, day), Decimal(0)) for line in series]
        rows.append(DayRow(day, figures, sum(figures, Decimal(0))))
    total = sum((line.total for line in series), Decimal(0))
    summary = ""
    if series:
        busiest = max(bars, key=lambda bar: bar.total)
        packages = "; ".join(
            f"{line.package} {money.display(line.total, currency)}" for line in series
        )
        summary = (
            f"Cost per UTC day from {day_label(first_day)} to {day_label(last_day)}, by "
            f"package: {money.display(total, currency)} in all, most on "
            f"{day_label(busiest.day)} ({money.display(busiest.total, currency)}). {packages}."
        )
    return UsageChart(
        width=width,
        height=height,
        plot_left=left,
        plot_right=right,
        plot_top=top,
        plot_bottom=bottom,
        currency=currency,
        bars=bars,
        series=series,
        rows=rows,
        y_ticks=[Tick(y(level), label) for level, label in zip(levels, labels, strict=True)],
        x_ticks=[
            Tick(bar.x + bar.width / 2, day_label(bar.day))
            for bar in bars
            if (last_day - bar.day).days % DAY_LABEL_EVERY == 0
        ],
        total=total,
        summary=summary,
    )
