"""The utilisation chart's geometry and the plain-language reasons (those of the lifecycle
too), as pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dashboard.charts import LEFT, RIGHT, TOP, Sample, utilisation_chart
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


def test_the_status_card_explains_lifecycle_reasons_but_not_running():
    assert status_explanation(unit(phase="Running", reason="Running")) == ""
    assert "restarting" in status_explanation(unit(phase="Provisioning", reason="Restarting"))
    assert status_explanation(unit(phase="Stopped", reason="Whatever")) == (
        "Kubernetes reports Whatever."
    )
