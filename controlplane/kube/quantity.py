"""Kubernetes resource quantities ("10", "500m", "40Gi"): strict syntax check and exact value."""

from __future__ import annotations

import re
from decimal import Decimal

from kubernetes.utils import parse_quantity

# The apiserver's grammar: signed decimal number, then one suffix (binary SI, decimal SI or
# a decimal exponent). parse_quantity alone is more lenient, so check the syntax first.
_QUANTITY = re.compile(
    r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)


def parse(value: str) -> Decimal:
    """Exact value of a quantity string; ValueError with a readable message when invalid."""
    if not isinstance(value, str) or not _QUANTITY.fullmatch(value.strip()):
        raise ValueError(f'"{value}" is not a Kubernetes quantity (examples: "10", "500m", "40Gi")')
    return Decimal(parse_quantity(value.strip()))


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
