"""Label and field selectors with the syntax and semantics of the Kubernetes API."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from simcluster.errors import ApiError
from simcluster.resources import COMMON_FIELDS, ResourceType

Predicate = Callable[[dict[str, Any]], bool]

_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET_REQUIREMENT = re.compile(r"^\s*(\S+)\s+(in|notin)\s*\((.*)\)\s*$")
_BINARY_REQUIREMENT = re.compile(r"^\s*([^=!<>\s]+)\s*(==|=|!=|>|<)\s*(.*?)\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside `in (...)` value sets."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part.strip()]


def _check_key(key: str, selector: str) -> None:
    if len(key) > 317 or not _LABEL_KEY.match(key):
        raise ApiError.bad_request(
            f"unable to parse requirement: {key!r}: name part must consist of alphanumeric "
            f"characters, '-', '_' or '.' (selector {selector!r})"
        )


def _check_value(value: str, selector: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ApiError.bad_request(
            f"unable to parse requirement: values[0]: Invalid value: {value!r}: a valid label "
            f"must be an empty string or consist of alphanumeric characters, '-', '_' or '.' "
            f"(selector {selector!r})"
        )


def parse_label_selector(selector: str | None) -> Predicate | None:
    """A predicate on an object's labels, or None when the selector selects everything."""
    if not selector or not selector.strip():
        return None
    requirements: list[Callable[[dict[str, str]], bool]] = []
    for raw in _split_top_level(selector):
        requirements.append(_label_requirement(raw.strip(), selector))

    def matches(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(requirement(labels) for requirement in requirements)

    return matches


def _label_requirement(raw: str, selector: str) -> Callable[[dict[str, str]], bool]:
    set_match = _SET_REQUIREMENT.match(raw)
    if set_match:
        key, operator, values_text = set_match.groups()
        _check_key(key, selector)
        values = {value.strip() for value in values_text.split(",") if value.strip()}
        for value in values:
            _check_value(value, selector)
        if operator == "in":
            return lambda labels: key in labels and labels[key] in values
        return lambda labels: labels.get(key) not in values
    if raw.startswith("!"):
        key = raw[1:].strip()
        _check_key(key, selector)
        return lambda labels: key not in labels
    binary = _BINARY_REQUIREMENT.match(raw)
    if binary:
        key, operator, value = binary.groups()
        _check_key(key, selector)
        if operator in ("=", "=="):
            _check_value(value, selector)
            return lambda labels: labels.get(key) == value
        if operator == "!=":
            _check_value(value, selector)
            return lambda labels: labels.get(key) != value
        try:
            bound = int(value)
        except ValueError:
            raise ApiError.bad_request(
                f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an "
                f"integer (selector {selector!r})"
            ) from None
        if operator == ">":
            return lambda labels: (
                _int_or_none(labels.get(key)) is not None and int(labels[key]) > bound
            )
        return lambda labels: _int_or_none(labels.get(key)) is not None and int(labels[key]) < bound
    _check_key(raw, selector)
    return lambda labels: raw in labels


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string form of a dotted field, as field selectors compare it ("" when absent)."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def parse_field_selector(selector: str | None, rtype: ResourceType) -> Predicate | None:
    """A predicate for a field selector, refusing fields the real server does not index."""
    if not selector or not selector.strip():
        return None
    requirements: list[tuple[str, str, bool]] = []
    for raw in re.split(r"(?<!\\),", selector):
        if not raw.strip():
            continue
        match = re.match(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*$", raw)
        if not match:
            raise ApiError.bad_request(f"invalid selector: '{selector}'; can't understand '{raw}'")
        name, operator, value = match.groups()
        if not rtype.supports_field(name):
            if rtype.crd is not None:
                known = ", ".join(f'"{f}"' for f in (*COMMON_FIELDS, *rtype.field_selectors))
                raise ApiError.bad_request(f'"{name}" is not a known field selector: only {known}')
            raise ApiError.bad_request(f"field label not supported: {name}")
        path = rtype.field_selectors.get(name, name)
        requirements.append((path, _unescape(value), operator == "!="))

    def matches(obj: dict[str, Any]) -> bool:
        for path, value, negate in requirements:
            if (field_value(obj, path) == value) == negate:
                return False
        return True

    return matches
