"""Kubernetes rules for names and quantities, as the API server applies them: pure functions
every app uses on what it will send to the cluster. Each returns an error message or None, so
callers can report every field at once."""

from __future__ import annotations

import ipaddress
import re

from django.core.exceptions import ValidationError

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
    if resource in ("memory", "ephemeral-storage") and amount % 1:
        return f'{resource} "{value}" is not a whole number of bytes.'
    return None


# Durations as Go and kubectl write them (`8h`, `90m`, `1h30m`, `45s`): whole units, largest
# first, each at most once. Used for stopAfter and the maximums ops set on it.
_DURATION = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")
_DURATION_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
MAX_DURATION_SECONDS = 366 * 86400


def parse_duration(value: str) -> tuple[int | None, str | None]:
    """(seconds, None) for a duration such as "8h" or "1h30m", else (None, the problem)."""
    match = _DURATION.fullmatch(value) if value else None
    if match is None or not any(match.groupdict().values()):
        return None, (
            f'"{value}" is not a duration: whole days, hours, minutes and seconds, largest '
            'first, e.g. "45s", "90m", "8h", "1h30m" or "7d".'
        )
    seconds = sum(int(match[unit] or 0) * size for unit, size in _DURATION_UNITS)
    if not 1 <= seconds <= MAX_DURATION_SECONDS:
        return (
            None,
            f'"{value}" is out of range: from 1s to {format_duration(MAX_DURATION_SECONDS)}.',
        )
    return seconds, None


def format_duration(seconds: int) -> str:
    """The canonical spelling of a duration: 5400 -> "1h30m", 86400 -> "1d"."""
    parts = []
    for unit, size in _DURATION_UNITS:
        amount, seconds = divmod(seconds, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


def validate_dns_label(value: str) -> None:
    """Model-field validator for a DNS-1123 label."""
    if problem := dns_label(value):
        raise ValidationError(problem)


FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}")


def file_name(value: str) -> str | None:
    """Why `value` is not a plain file name (one path component, no leading dot), or None."""
    if FILE_NAME.fullmatch(value):
        return None
    return f'"{value}" is not a file name (letters, digits, ".", "_", "-"; no "/", no leading ".").'


def validate_file_name(value: str) -> None:
    """Model-field validator for a plain file name inside a directory the settings name."""
    if problem := file_name(value):
        raise ValidationError(problem)


def validate_cidr(value: str) -> None:
    """Model-field validator for one network in CIDR notation (IPv4 or IPv6, host bits zero)."""
    try:
        network = ipaddress.ip_network(value)
    except ValueError as error:
        raise ValidationError(f'"{value}" is not a network in CIDR notation ({error}).') from None
    if network.prefixlen == 0:
        raise ValidationError(f'"{value}" is every address; name the cluster\'s own range.')


def validate_duration(value: str) -> None:
    """Model-field validator for a duration setting (blank means none)."""
    if value and (problem := parse_duration(value)[1]):
        raise ValidationError(problem)
