"""Kubernetes resource quantities ("10", "500m", "40Gi"): the apiserver's grammar, exact values.

The one home of quantity parsing for the catalog, inventory, runtime, the CEL helpers and the
simulated cluster. It loads neither Django nor the Kubernetes API client: the official client's
`kubernetes.utils.parse_quantity` cannot be imported without `kubernetes/__init__` loading the
whole client, and it is laxer than the apiserver ("1K", "inf", " 1" pass), so the grammar of
apimachinery's `resource.ParseQuantity` is implemented here, and its values are tested equal
to the official client's on generated quantities both accept. Like ParseQuantity it takes no
surrounding spaces (the API server trims them from JSON before parsing; callers do the same).
"""

from __future__ import annotations

import functools
import re
from decimal import ROUND_CEILING, Decimal

# <signedNumber><suffix>: a decimal number, then binary SI, decimal SI or a decimal exponent.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIXES = {exponent: suffix for suffix, exponent in _DECIMAL.items()} | {0: ""}


def parse(value: str) -> Decimal:
    """Exact value of a quantity string; ValueError with a readable message when invalid."""
    if not isinstance(value, str):
        raise ValueError(f'"{value}" is not a Kubernetes quantity (examples: "10", "500m", "40Gi")')
    return _parse(value)


@functools.lru_cache(maxsize=4096)
def _parse(value: str) -> Decimal:
    # The same few quantities ("1", "40Gi") come back all the time: parsed once each.
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError(f'"{value}" is not a Kubernetes quantity (examples: "10", "500m", "40Gi")')
    number = Decimal(match["number"])
    try:
        if match["binary"]:
            return number * (1024 ** _BINARY[match["binary"]])
        if match["decimal"]:
            return number.scaleb(_DECIMAL[match["decimal"]])
        if match["exponent"]:
            return number.scaleb(int(match["exponent"]))
    except ArithmeticError as exc:  # decimal.Overflow: beyond any quantity the server keeps
        raise ValueError(f'"{value}" is out of range for a Kubernetes quantity') from exc
    return number


def is_quantity(value: str) -> bool:
    try:
        parse(value)
    except ValueError:
        return False
    return True


def same_value(a: str, b: str) -> bool:
    """True when two quantity strings denote the same amount ("10" and "10000m")."""
    try:
        return parse(a) == parse(b)
    except ValueError:
        return a == b


def parse_cpu(value: str) -> int:
    """A cpu quantity in millicores, as quotas add them up: "10" -> 10000, "500m" -> 500."""
    return int(parse(value) * 1000)


def parse_bytes(value: str) -> int:
    """A memory quantity in bytes: "40Gi" -> 42949672960."""
    return int(parse(value))


def format_cpu(millicores: int) -> str:
    """Millicores as Kubernetes writes them: "10", "500m"."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def format_bytes(size: int) -> str:
    """Bytes in the largest binary unit that divides them exactly: "40Gi", "1536Mi"."""
    for suffix, factor in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size and size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)


def format_quantity(amount: Decimal, *, binary: bool = False) -> str:
    """Canonical Quantity text as the API server prints it: "40Gi", "1536Mi", "500m", "2", "1k"."""
    if binary and amount == amount.to_integral_value() and abs(amount) >= 1024:
        number, suffix = int(amount), ""
        for candidate in _BINARY:
            if number % 1024:
                break
            number, suffix = number // 1024, candidate
        return f"{number}{suffix}"
    # Quantities carry at most nano precision and round up to it.
    number = int((amount * 10**9).to_integral_value(rounding=ROUND_CEILING))
    if number == 0:
        return "0"
    exponent = -9
    while number % 1000 == 0 and exponent < 15:
        number, exponent = number // 1000, exponent + 3
    return f"{number}{_DECIMAL_SUFFIXES[exponent]}"
