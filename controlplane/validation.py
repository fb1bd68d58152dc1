"""Kubernetes rules for names and quantities, as the API server applies them: pure functions
every app uses on what it will send to the cluster. Each returns an error message or None, so
callers can report every field at once."""

from __future__ import annotations

import re

from dracel import quantity

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def fold_case(value: str) -> str:
    """Lower-case ASCII only. `str.lower` folds Unicode too (KELVIN SIGN U+212A becomes "k"),
    which would make a name valid that the client never sent; anything non-ASCII stays as sent
    and so fails the DNS checks below."""
    return value.lower() if value.isascii() else value


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
