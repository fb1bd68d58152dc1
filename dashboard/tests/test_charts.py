"""The utilisation and usage charts' geometry and the plain-language reasons (those of the
lifecycle too), as pure functions."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from dashboard import money
from dashboard.charts import (
    LEFT,
    RIGHT,
    SERIES_COLOURS,
    TOP,
    USAGE_BOTTOM,
    USAGE_RIGHT,
    USAGE_TOP,
    Sample,
    nice_step,
    usage_chart,
    utilisation_chart,
)
from dashboard.reasons import SENTENCES, explain, status_explanation
from runtime.models import GPUUnit

START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def points(line: str) -> list[tuple[float, float]]:
    return [tuple(float(v) for v in pair.split(",")) for pair in line.split()]


def test_empty_history_draws_nothing():
    chart = utilisation_chart([])
    assert chart.empty
    assert chart.allocated_line == ""


def test_samples_span_the_plot_scaled_to_the_peak():
    samples = [
        Sample(START, 0, 24),
        Sample(START + timedelta(seconds=30), 12, 24),
        Sample(START + timedelta(seconds=60), 24, 24),
    ]
    chart = utilisation_chart(samples, width=400, height=200)
    line = points(chart.allocated_line)
    bottom = 200 - 28
    assert line == [
        (LEFT, bottom),
        ((LEFT + 400 - RIGHT) / 2, (bottom + TOP) / 2),
        (400 - RIGHT, TOP),
    ]
    assert points(chart.capacity_line) == [(x, TOP) for x, _ in line]
    area = points(chart.allocated_area)
    assert area[0] == (LEFT, bottom)
    assert area[-1] == (400 - RIGHT, bottom)
    assert [tick.label for tick in chart.y_ticks] == ["0", "12", "24"]
    assert [tick.label for tick in chart.x_ticks] == ["12:00:00", "12:01:00"]
    assert "3 inventory syncs" in chart.summary
    assert "24 of 24 devices allocated now, at most 24 at 12:01:00" in chart.summary


def test_single_sample_is_drawn_as_a_level():
    chart = utilisation_chart([Sample(START, 2, 8)], width=400, height=200)
    line = points(chart.allocated_line)
    assert [x for x, _ in line] == [LEFT, 400 - RIGHT]
    assert line[0][1] == line[1][1]
    assert len(chart.x_ticks) == 1


def test_zero_capacity_does_not_divide_by_zero():
    chart = utilisation_chart([Sample(START, 0, 0), Sample(START + timedelta(seconds=5), 0, 0)])
    assert not chart.empty


LAST_DAY = date(2026, 11, 28)


def test_no_cost_in_the_window_draws_nothing():
    chart = usage_chart({}, last_day=LAST_DAY, currency="USD")
    assert chart.empty
    assert chart.series == []
    assert chart.rows == []
    assert chart.summary == ""
    assert len(chart.bars) == 30
    # Usage only before the window is not drawn either.
    old = usage_chart(
        {("h100", LAST_DAY - timedelta(days=30)): Decimal(5)}, last_day=LAST_DAY, currency="USD"
    )
    assert old.empty


def test_bars_stack_each_days_packages_scaled_to_the_busiest_day():
    costs = {
        ("h100", date(2026, 11, 27)): Decimal("5.40"),
        ("l40s", date(2026, 11, 27)): Decimal("2.00"),
        ("l40s", date(2026, 11, 28)): Decimal("1.00"),
        ("h100", date(2026, 10, 30)): Decimal("3.60"),  # the window's first day
    }
    chart = usage_chart(costs, last_day=LAST_DAY, days=30, currency="USD", width=400, height=200)
    assert not chart.empty
    assert [(s.package, s.colour, s.total) for s in chart.series] == [
        ("h100", 0, Decimal("9.00")),
        ("l40s", 1, Decimal("3.00")),
    ]
    bottom, top = 200 - USAGE_BOTTOM, USAGE_TOP
    # 7.40 on the busiest day: round steps of 2 up to 8.
    assert [tick.label for tick in chart.y_ticks] == ["0", "2", "4", "6", "8"]
    assert chart.y_ticks[0].position == bottom
    assert chart.y_ticks[-1].position == top
    per_unit = (bottom - top) / 8
    days = {bar.day: bar for bar in chart.bars}
    assert chart.bars[0].day == date(2026, 10, 30)
    busiest = days[date(2026, 11, 27)]
    h100, l40s = busiest.segments
    assert (h100.package, l40s.package) == ("h100", "l40s")
    assert h100.height == pytest.approx(5.4 * per_unit)
    assert h100.y + h100.height == pytest.approx(bottom)  # the first package sits on the axis
    assert l40s.y + l40s.height == pytest.approx(h100.y)  # the next one on top of it
    assert l40s.height == pytest.approx(2 * per_unit)
    assert l40s.label == "l40s on 27 Nov: USD 2.00"
    assert [s.package for s in days[LAST_DAY].segments] == ["l40s"]
    assert days[date(2026, 11, 1)].segments == []
    # Thirty slots side by side across the plot, the last one ending at its right edge.
    slot = (400 - USAGE_RIGHT - chart.plot_left) / 30
    assert chart.bars[0].x == pytest.approx(chart.plot_left + 0.15 * slot)
    assert chart.bars[-1].x + chart.bars[-1].width == pytest.approx(400 - USAGE_RIGHT - 0.15 * slot)
    # A label a week, counted back from the last day.
    assert [tick.label for tick in chart.x_ticks] == [
        "31 Oct",
        "7 Nov",
        "14 Nov",
        "21 Nov",
        "28 Nov",
    ]
    assert [(row.day, row.costs, row.total) for row in chart.rows] == [
        (date(2026, 10, 30), [Decimal("3.60"), Decimal(0)], Decimal("3.60")),
        (date(2026, 11, 27), [Decimal("5.40"), Decimal("2.00")], Decimal("7.40")),
        (date(2026, 11, 28), [Decimal(0), Decimal("1.00")], Decimal("1.00")),
    ]
    assert chart.total == Decimal("12.00")
    assert chart.summary == (
        "Cost per UTC day from 30 Oct to 28 Nov, by package: USD 12.00 in all, most on 27 Nov "
        "(USD 7.40). h100 USD 9.00; l40s USD 3.00."
    )


def test_a_net_negative_day_draws_nothing_but_stays_in_the_table():
    costs = {
        ("h100", date(2026, 11, 27)): Decimal("-1.00"),  # a correction of an earlier day
        ("h100", date(2026, 11, 28)): Decimal("1.00"),
    }
    chart = usage_chart(costs, last_day=LAST_DAY, currency="USD")
    assert [bar.segments for bar in chart.bars if bar.day == date(2026, 11, 27)] == [[]]
    assert chart.rows[0].costs == [Decimal("-1.00")]
    assert chart.y_ticks[-1].label == "1.00"


def test_packages_beyond_the_palette_reuse_its_colours():
    costs = {(f"p{n:02d}", LAST_DAY): Decimal(1) for n in range(SERIES_COLOURS + 2)}
    chart = usage_chart(costs, last_day=LAST_DAY, currency="EUR")
    assert [s.colour for s in chart.series][-3:] == [SERIES_COLOURS - 1, 0, 1]
    assert "EUR 10.00 in all" in chart.summary


@pytest.mark.parametrize(
    ("span", "step"),
    [
        ("7.40", "2"),
        ("1", "0.25"),
        ("4", "1"),
        ("9", "2.5"),
        ("180", "50"),
        ("0.003", "0.001"),
    ],
)
def test_axis_steps_are_round(span, step):
    assert nice_step(Decimal(span)) == Decimal(step)


def test_small_costs_label_the_axis_with_the_digits_they_need():
    chart = usage_chart({("h100", LAST_DAY): Decimal("0.003")}, last_day=LAST_DAY, currency="USD")
    assert [tick.label for tick in chart.y_ticks] == ["0.000", "0.001", "0.002", "0.003"]
    # Wider labels move the plot right, so none runs into the bars.
    assert (
        chart.plot_left
        > usage_chart({("h100", LAST_DAY): Decimal(3)}, last_day=LAST_DAY, currency="USD").plot_left
    )


def test_money_reads_in_cents_with_thousands_and_keeps_the_exact_figure():
    assert money.display(Decimal("3882.345"), "USD") == "USD 3,882.35"
    assert money.exact(Decimal("3882.345"), "USD") == "USD 3882.345000"
    assert money.display(Decimal("0.004"), "EUR") == "EUR 0.00"
    # A correction that nets to nothing is not shown as a credit of -0.00.
    assert money.display(Decimal("-0.001"), "USD") == "USD 0.00"
    assert money.number(Decimal("-0.0000001")) == "0.000000"
    assert money.display(Decimal("-5.4"), "USD") == "USD -5.40"


def unit(**fields) -> GPUUnit:
    base = {
        "name": "demo",
        "namespace": "team-a",
        "gpu": 4,
        "device_class_name": "nvidia-h100",
        "image": "ghcr.io/org/app:1",
        "claim_name": "unit-demo-gpu",
    }
    return GPUUnit(**{**base, **fields})


def test_every_documented_reason_has_a_sentence_with_the_units_facts():
    for reason in (
        "NoMatchingDevices",
        "DeviceClassNotFound",
        "QuotaExceeded",
        "ImagePullFailed",
        "ContainerCrashLoop",
        "NameInUse",
        "ProvisioningFailed",
    ):
        assert reason in SENTENCES
    assert explain(unit(reason="NoMatchingDevices")).startswith(
        "No node has 4 free nvidia-h100 GPUs"
    )
    assert "ghcr.io/org/app:1" in explain(unit(reason="ImagePullFailed"))
    assert "namespace team-a" in explain(unit(reason="QuotaExceeded"))


def test_unknown_reason_is_named_and_no_reason_says_nothing():
    assert explain(unit(reason="Evicted")) == "Kubernetes reports Evicted."
    assert explain(unit(reason="")) == ""


LIFECYCLE_REASONS = (
    "StopRequested",
    "AutoStop",
    "StartDeadlineExceeded",
    "Stopped",
    "StartRequested",
    "Restarting",
    "Updating",
    "Started",
    "Restarted",
    "Updated",
    "UpdateRequested",
    "DeviceUnhealthy",
    "StopFailed",
    "StartFailed",
    "RestartFailed",
    "UpdateFailed",
)


def test_every_lifecycle_reason_has_words():
    assert [reason for reason in LIFECYCLE_REASONS if reason not in SENTENCES] == []


def test_a_start_and_a_starting_pod_read_apart():
    assert "starting again" in explain(unit(phase="Provisioning", reason="StartRequested"))
    assert explain(unit(phase="Pending", reason="Starting")) == SENTENCES["Starting"]


def test_device_unhealthy_says_a_restart_gets_healthy_gpus():
    failed = unit(phase="Failed", reason="DeviceUnhealthy")
    assert "Restart the unit to get healthy GPUs" in status_explanation(failed)


def test_lifecycle_words_use_the_units_facts():
    assert "stopAfter of 8h" in explain(unit(reason="AutoStop", stop_after="8h"))
    assert "generation 4" in explain(unit(reason="Updating", generation=4))
    assert "its 4 GPUs go back to the pool" in explain(unit(reason="StopRequested"))
    assert "held its 4 GPUs" in explain(unit(reason="StartDeadlineExceeded"))


def test_the_status_card_explains_lifecycle_reasons_but_not_running():
    assert status_explanation(unit(phase="Running", reason="Running")) == ""
    assert "restarting" in status_explanation(unit(phase="Provisioning", reason="Restarting"))
    assert status_explanation(unit(phase="Stopped", reason="Whatever")) == (
        "Kubernetes reports Whatever."
    )
