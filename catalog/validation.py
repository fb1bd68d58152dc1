"""Pure validators for the package contract; the model's clean() is their only caller.

Each returns an error message or None, so callers can report every field at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import dracel
from dracel import quantity

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def dns_label(value: str) -> str | None:
    if not value:
        return "This field is required."
    if len(value) > 63 or not DNS_LABEL.fullmatch(value):
        return (
            f'"{value}" is not a DNS-1123 label: at most 63 lower-case letters, digits and '
            "'-', starting and ending with a letter or digit."
        )
    return None


def dns_subdomain(value: str) -> str | None:
    if not value:
        return "This field is required."
    if len(value) > 253 or not DNS_SUBDOMAIN.fullmatch(value):
        return (
            f'"{value}" is not a DNS-1123 subdomain: lower-case labels of letters, digits and '
            "'-' joined by '.', at most 253 characters."
        )
    return None


def qualified_name(value: str) -> str | None:
    """Kubernetes qualified name: optional DNS-subdomain prefix and '/', then a 63-char name."""
    prefix, _, name = value.rpartition("/")
    if prefix and dns_subdomain(prefix):
        return f'"{value}" has an invalid prefix: {dns_subdomain(prefix)}'
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        return f'"{value}" is not a qualified name (letters, digits, "-", "_", "."; at most 63).'
    return None


def positive_quantity(value: str, *, resource: str) -> str | None:
    if not value:
        return "This field is required."
    try:
        amount = quantity.parse(value)
    except ValueError as exc:
        return str(exc)
    if amount <= 0:
        return f'{resource} must be greater than zero, got "{value}".'
    if resource == "cpu" and (amount * 1000) % 1:
        return f'cpu "{value}" is finer than the smallest unit Kubernetes keeps (1m).'
    if resource == "memory" and amount % 1:
        return f'memory "{value}" is not a whole number of bytes.'
    return None


def cel_expressions(expressions: Iterable[object]) -> str | None:
    """Every selector must be a non-empty string that compiles as CEL."""
    problems = []
    for index, expression in enumerate(expressions):
        if not isinstance(expression, str) or not expression.strip():
            problems.append(f"selector {index} must be a non-empty CEL expression.")
            continue
        try:
            dracel.compile_selector(expression)
        except dracel.CelCompileError as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else "syntax error"
            problems.append(f"selector {index} does not compile as CEL: {first_line}")
    return " ".join(problems) or None


def capacity_requests(capacity: object) -> str | None:
    if not isinstance(capacity, dict):
        return "capacity must be a mapping of capacity name to quantity."
    problems = []
    for key, value in capacity.items():
        key_error = qualified_name(str(key))
        if key_error:
            problems.append(key_error)
        try:
            quantity.parse(str(value))
        except ValueError as exc:
            problems.append(f"capacity {key}: {exc}")
    return " ".join(problems) or None
