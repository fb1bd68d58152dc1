"""Pure helpers: selector parsing and matching, HumanDuration, printer-column JSONPath."""

from __future__ import annotations

import pytest

from simcluster.errors import ApiError
from simcluster.resources import Registry
from simcluster.selectors import parse_field_selector, parse_label_selector
from simcluster.tables import claim_state, human_duration, json_path


def _labelled(**labels: str) -> dict:
    return {"metadata": {"labels": labels}}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "db"}, False),
        ("app!=web", {}, True),
        ("app in (web, db)", {"app": "db"}, True),
        ("app notin (web)", {}, True),
        ("app notin (web)", {"app": "web"}, False),
        ("tier", {"tier": "1"}, True),
        ("!tier", {"tier": "1"}, False),
        ("app in (a,b),tier=1", {"app": "b", "tier": "1"}, True),
        ("gpus>2", {"gpus": "4"}, True),
        ("gpus<2", {"gpus": "4"}, False),
    ],
)
def test_label_selector_matches_like_kubernetes(
    selector: str, labels: dict, expected: bool
) -> None:
    predicate = parse_label_selector(selector)

    assert predicate is not None
    assert predicate(_labelled(**labels)) is expected


def test_label_selector_rejects_bad_syntax() -> None:
    with pytest.raises(ApiError) as exc_info:
        parse_label_selector("app=not a value")

    assert exc_info.value.code == 400


def test_field_selector_on_pod_fields_and_unknown_fields() -> None:
    pods = Registry().get("pods")
    assert pods is not None
    predicate = parse_field_selector("spec.nodeName=n1,status.phase!=Failed", pods)

    assert predicate is not None
    assert predicate({"metadata": {}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    assert not predicate({"metadata": {}, "spec": {}, "status": {"phase": "Running"}})
    with pytest.raises(ApiError, match=r"field label not supported: spec\.foo"):
        parse_field_selector("spec.foo=x", pods)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (30 * 3600, "30h"),
        (50 * 3600, "2d2h"),
        (400 * 86400, "400d"),
        (800 * 86400, "2y70d"),
    ],
)
def test_human_duration_matches_apimachinery(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_json_path_reads_printer_column_paths() -> None:
    obj = {"spec": {"items": [{"n": 1}], "labels": {"a.b/c": "x"}}}

    assert json_path(obj, ".spec.items[0].n") == 1
    assert json_path(obj, ".spec.labels['a.b/c']") == "x"
    assert json_path(obj, ".spec.missing") is None


def test_claim_state_summarises_status() -> None:
    allocated = {"metadata": {}, "status": {"allocation": {}, "reservedFor": [{"uid": "1"}]}}
    allocated["status"]["allocation"] = {"devices": {"results": []}}
    deleting = {
        "metadata": {"deletionTimestamp": "2025-01-01T00:00:00Z"},
        "status": allocated["status"],
    }

    assert claim_state({"metadata": {}}) == "pending"
    assert claim_state(allocated) == "allocated,reserved"
    assert claim_state(deleting) == "deleted,allocated,reserved"
