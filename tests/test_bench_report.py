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
    assert "cold 3.0× met" in passing  # noqa: RUF001
