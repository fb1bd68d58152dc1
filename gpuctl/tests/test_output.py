"""-o table, json and yaml: the API's data as it came for json and yaml; tables of chosen
columns (or fields of one object) that never wrap when piped."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import yaml

from gpuctl.commands.account import quota_lines
from gpuctl.output import Column, Format, age, cell, dig, emit

UNITS = [
    {
        "name": "a-rather-long-unit-name-that-stays-whole",
        "phase": "Running",
        "access": {"url": None},
    },
    {"name": "b", "phase": "Pending", "reason": "NoMatchingDevices", "access": {"url": "http://b"}},
]
COLUMNS = [
    Column("NAME", "name"),
    Column("PHASE", "phase"),
    Column("REASON", "reason"),
    Column("URL", "access.url"),
]


def shown(data, format: Format, **options) -> str:
    out = io.StringIO()
    emit(data, format, columns=COLUMNS, file=out, **options)
    return out.getvalue()


def test_json_and_yaml_are_the_data_as_it_came():
    assert json.loads(shown(UNITS, Format.JSON)) == UNITS
    assert yaml.safe_load(shown(UNITS, Format.YAML)) == UNITS
    assert shown(UNITS[1], Format.YAML).startswith("name: b\nphase: Pending\n")  # API order kept


def test_a_table_has_a_row_per_record_and_never_wraps_when_piped():
    lines = shown(UNITS, Format.TABLE).splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "REASON", "URL"]
    rows = [line.split() for line in lines[1:]]
    assert rows == [
        ["a-rather-long-unit-name-that-stays-whole", "Running"],
        ["b", "Pending", "NoMatchingDevices", "http://b"],
    ]
    assert "\x1b[" not in "\n".join(lines)  # no colours into a pipe


def test_one_object_is_a_table_of_its_fields_without_the_empty_ones():
    text = shown(UNITS[0], Format.TABLE, single=True)
    rows = [line.split() for line in text.splitlines() if line.strip()]
    assert rows == [["NAME", "a-rather-long-unit-name-that-stays-whole"], ["PHASE", "Running"]]


def test_a_caption_goes_under_the_table():
    text = shown(UNITS, Format.TABLE, caption="2 units")
    assert text.rstrip().splitlines()[-1].strip() == "2 units"


def test_cells_show_lists_objects_booleans_and_nothing_for_none():
    assert cell(None).plain == ""
    assert cell(["x", "y"]).plain == "x, y"
    assert cell({"b": 1, "a": [2]}).plain == '{"a":[2],"b":1}'
    assert (cell(True).plain, cell(False).plain) == ("yes", "no")
    assert dig({"a": {"b": 1}}, "a.b") == 1
    assert dig({"a": None}, "a.b") is None


def test_age_reads_like_kubectl_s():
    now = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)
    assert age("2026-01-02T11:59:15Z", now=now) == "45s"
    assert age("2026-01-02T11:48:00+00:00", now=now) == "12m"
    assert age("2026-01-02T08:59:59.123456Z", now=now) == "3h"
    assert age("2025-12-28T12:00:00Z", now=now) == "5d"
    assert age(None) == ""


def test_quota_lines_flatten_every_hard_used_free_line():
    quota = {
        "cpu": {"hard": "100", "used": "10", "free": "90"},
        "memory": {"hard": "1Ti", "used": "40Gi", "free": "984Gi"},
        "claims": {"hard": "10", "used": "1", "free": "9"},
        "devices": {"nvidia-h100": {"hard": "8", "used": "2", "free": "6"}},
        "limits": {"sshKeys": {"hard": "32", "used": "1", "free": "31"}, "storageClasses": []},
        "costToDate": "1.000000",
    }
    assert [line["resource"] for line in quota_lines(quota)] == [
        "cpu",
        "memory",
        "claims",
        "devices nvidia-h100",
        "sshKeys",
    ]
