"""Quantities: the apiserver's grammar, exact values equal to the official client's parser on
everything both accept, and the text the API server prints."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as client_parse_quantity

from dracel import quantity

SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]
numbers = st.one_of(
    st.integers(min_value=0, max_value=10**12).map(str),
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)).map(lambda p: f"{p[0]}.{p[1]}"),
    st.integers(0, 10**6).map(lambda n: f".{n}"),
)


@given(
    sign=st.sampled_from(["", "+", "-"]),
    number=numbers,
    suffix=st.one_of(st.sampled_from(SUFFIXES), st.integers(-20, 20).map(lambda e: f"e{e}")),
)
def test_value_equals_the_official_client_parser(sign: str, number: str, suffix: str) -> None:
    text = f"{sign}{number}{suffix}"
    assert quantity.parse(text) == client_parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10", Decimal(10)),
        ("500m", Decimal("0.5")),
        ("40Gi", Decimal(40 * 2**30)),
        ("1.5Ki", Decimal(1536)),
        ("1E", Decimal(10**18)),
        ("1E3", Decimal(1000)),
        ("2e-3", Decimal("0.002")),
        ("5.", Decimal(5)),
        (".5", Decimal("0.5")),
        ("-1k", Decimal(-1000)),
    ],
)
def test_parse_gives_exact_values(text: str, value: Decimal) -> None:
    assert quantity.parse(text) == value


@pytest.mark.parametrize(
    "text", ["", " 1", "1 ", "1K", "1ki", "1Ki2", "inf", "NaN", "1e", "1e1.5", "0x10", "1..0", "m"]
)
def test_rejects_what_the_apiserver_rejects(text: str) -> None:
    # The official client's parser accepts several of these ("1K", "inf", " 1").
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        quantity.parse(text)
    assert not quantity.is_quantity(text)


def test_rejects_values_beyond_any_quantity_with_a_value_error() -> None:
    with pytest.raises(ValueError, match="out of range"):
        quantity.parse("1e999999999")


def test_cpu_and_memory_conversions() -> None:
    assert quantity.parse_cpu("10") == 10_000
    assert quantity.parse_cpu("500m") == 500
    assert quantity.parse_bytes("40Gi") == 40 * 2**30
    assert quantity.format_cpu(10_000) == "10"
    assert quantity.format_cpu(1500) == "1500m"
    assert quantity.format_bytes(1536 * 2**20) == "1536Mi"
    assert quantity.format_bytes(1000) == "1000"
    assert quantity.same_value("10", "10000m")
    assert not quantity.same_value("1Gi", "1G")


@pytest.mark.parametrize(
    ("amount", "binary", "text"),
    [
        (Decimal("42949672960"), True, "40Gi"),
        (Decimal(1536 * 2**20), True, "1536Mi"),
        (Decimal(2**40), True, "1Ti"),
        (Decimal(1000), True, "1k"),
        (Decimal("0.5"), False, "500m"),
        (Decimal("2.5"), False, "2500m"),
        (Decimal(10), False, "10"),
        (Decimal(0), True, "0"),
        (Decimal("0.0000000001"), False, "1n"),
    ],
)
def test_format_quantity_prints_like_the_api_server(
    amount: Decimal, binary: bool, text: str
) -> None:
    assert quantity.format_quantity(amount, binary=binary) == text


def test_importing_it_loads_neither_django_nor_the_kubernetes_client() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, dracel.quantity; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'kubernetes'}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert loaded == "[]"
