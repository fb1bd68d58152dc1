"""The utilisation chart as plain geometry: samples in, SVG coordinates and labels out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

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
