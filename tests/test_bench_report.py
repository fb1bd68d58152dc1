"""docs/benchmarks.md is exactly what bench/report.py renders from the figures it carries, and
the floors it marks follow the figures."""

from __future__ import annotations

import copy
import json

from bench import report


def committed_figures() -> dict[str, dict]:
    text = report.DOCUMENT.read_text()
    block = text.split("## JSON lines\n\n```\n", 1)[1].split("```", 1)[0]
    lines = [json.loads(line) for line in block.splitlines() if line.strip()]
    return {figures["bench"]: figures for figures in lines}


def test_the_committed_document_is_the_rendering_of_its_own_figures():
    figures = committed_figures()
    assert set(figures) == set(report.SECTIONS)
    assert report.render(figures) == report.DOCUMENT.read_text()


def test_floor_verdicts_follow_the_figures():
    figures = copy.deepcopy(committed_figures())
    create, inventory = figures["api_create"], figures["inventory"]
    create["create_ratio"], inventory["d10000_cold_ratio"] = 0.19, 3.01
    failing = report.render(figures)
    assert "| ≥ 0.2: **not met** |" in failing
    assert "cold 3.01× **not met**" in failing  # noqa: RUF001
    create["create_ratio"], inventory["d10000_cold_ratio"] = 0.2, 3.0
    passing = report.render(figures)
    assert "| ≥ 0.2: met |" in passing
    burst, idle = figures["end_to_end"], figures["time_to_running"]
    burst["units_per_s_ratio"], idle["overhead_p50_s"] = 0.69, 0.51
    failing = report.render(figures)
    assert "units/s ≥ 0.7 of direct: **not met**" in failing
    assert "overhead p50 ≤ 0.5 s: **not met**" in failing
    burst["units_per_s_ratio"], idle["overhead_p50_s"] = 0.7, 0.5
    passing = report.render(figures)
    assert "units/s ≥ 0.7 of direct: met" in passing
    assert "overhead p50 ≤ 0.5 s: met" in passing
    assert "cold 3.0× met" in passing  # noqa: RUF001


def test_the_fleet_ceilings_follow_the_figures():
    figures = copy.deepcopy(committed_figures())
    fleet = figures["observer_cost"]
    large = f"u{fleet['sizes'][-1]}"
    fleet[f"{large}_backstop_tick_s"], fleet[f"{large}_observer_rss_mb"] = 0.51, 200.1
    failing = report.render(figures)
    assert "≤ 0.5 s: 0.51 s **not met**" in failing
    assert "≤ 200 MB: 200.1 MB **not met**" in failing
    fleet[f"{large}_backstop_tick_s"], fleet[f"{large}_observer_rss_mb"] = 0.5, 200.0
    passing = report.render(figures)
    assert "≤ 0.5 s: 0.5 s met" in passing
    assert "≤ 200 MB: 200.0 MB met" in passing
