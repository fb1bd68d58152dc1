"""The article's `packages:` YAML <-> Package field values. Pure: no database access."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import yaml

from catalog.models import (
    DEFAULT_PREEMPTION_NOTICE_SECONDS,
    DEFAULT_TERMINATION_GRACE_SECONDS,
    PREEMPTION_NOTICE_RANGE,
    TERMINATION_GRACE_RANGE,
)
from catalog.validation import money

ENTRY_KEYS = {
    "id",
    "specName",
    "cpu",
    "memory",
    "gpu",
    "allocation",
    "maxStopAfter",
    "ephemeralStorage",
    "terminationGracePeriodSeconds",
    "regions",
    "price",
    "alternativePrices",
    "interruptible",
    "active",
}
INTERRUPTIBLE_KEYS = {"price", "noticeSeconds"}
ALLOCATION_KEYS = {
    "deviceClassName",
    "claimRequestName",
    "count",
    "selectors",
    "capacity",
    "alternatives",
    "matchAttribute",
}


class CatalogFormatError(ValueError):
    """The document is not a `packages:` list of the expected shape."""


def _text(value: Any) -> str:
    """YAML reads `cpu: 10` as an int; quantities are strings in Kubernetes."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def parse_document(text: str) -> list[dict]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogFormatError(f"not valid YAML: {exc}") from exc
    if not isinstance(document, dict) or set(document) != {"packages"}:
        raise CatalogFormatError("the document must have exactly one top-level key, `packages`.")
    packages = document["packages"] or []
    if not isinstance(packages, list):
        raise CatalogFormatError("`packages` must be a list.")
    return packages


def entry_to_fields(entry: Any) -> tuple[dict, dict[str, str]]:
    """Map one YAML entry to model field values, plus shape errors keyed by YAML path."""
    if not isinstance(entry, dict):
        return {}, {"": "each package must be a mapping."}
    errors: dict[str, str] = {}
    for key in sorted(set(entry) - ENTRY_KEYS):
        errors[key] = "unknown field."
    allocation = entry.get("allocation")
    if not isinstance(allocation, dict):
        errors["allocation"] = "allocation must be a mapping with deviceClassName and count."
        allocation = {}
    if "claimName" in allocation:
        errors["allocation.claimName"] = (
            "claimName is derived per unit (unit-<name>-gpu) and cannot be set in the catalog."
        )
    for key in sorted(set(allocation) - ALLOCATION_KEYS - {"claimName"}):
        errors[f"allocation.{key}"] = "unknown field."
    active = entry.get("active", True)
    if not isinstance(active, bool):
        errors["active"] = "active must be true or false."
    grace = entry.get("terminationGracePeriodSeconds", DEFAULT_TERMINATION_GRACE_SECONDS)
    # A number, as in a pod spec: YAML's "30", 1.5 or true would pass the model's int().
    if isinstance(grace, bool) or not isinstance(grace, int):
        errors["terminationGracePeriodSeconds"] = TERMINATION_GRACE_RANGE % {
            "value": json.dumps(grace, default=str)  # as YAML would say it: "30", null, true
        }
        grace = DEFAULT_TERMINATION_GRACE_SECONDS
    interruptible, errors_of_interruptible = _interruptible(entry.get("interruptible"))
    errors.update(errors_of_interruptible)
    regions = entry.get("regions")
    if regions is None:
        regions = []
    # Not through `_text`: a YAML 1 or true would become a region nobody named.
    if not isinstance(regions, list) or not all(isinstance(r, str) for r in regions):
        errors["regions"] = "regions must be a list of region names (strings)."
        regions = []
    fields = {
        "id": _text(entry.get("id")),
        "spec_name": _text(entry.get("specName")),
        "cpu": _text(entry.get("cpu")),
        "memory": _text(entry.get("memory")),
        "gpu": entry.get("gpu"),
        "device_class_name": _text(allocation.get("deviceClassName")),
        "claim_request_name": _text(allocation.get("claimRequestName")) or "gpu",
        "count": allocation.get("count"),
        "selectors": allocation.get("selectors") or [],
        "capacity": {k: _text(v) for k, v in (allocation.get("capacity") or {}).items()}
        if isinstance(allocation.get("capacity") or {}, dict)
        else allocation.get("capacity"),
        "alternatives": allocation.get("alternatives") or [],
        "match_attribute": _text(allocation.get("matchAttribute")),
        "max_stop_after": _text(entry.get("maxStopAfter")),
        "ephemeral_storage": _text(entry.get("ephemeralStorage")),
        "termination_grace_seconds": grace,
        "regions": regions,
        "price": _text(entry.get("price")) or "0",
        "alternative_prices": {str(k): _text(v) for k, v in entry["alternativePrices"].items()}
        if isinstance(entry.get("alternativePrices"), dict)
        else entry.get("alternativePrices") or {},
        **interruptible,
        "active": active is not False,
    }
    return fields, errors


def _interruptible(value: Any) -> tuple[dict, dict[str, str]]:
    """`interruptible: {price, noticeSeconds?}` -> the package's interruptible fields (absent
    or null: not sold as interruptible)."""
    off = {
        "interruptible": False,
        "interruptible_price": "0",
        "preemption_notice_seconds": DEFAULT_PREEMPTION_NOTICE_SECONDS,
    }
    if value is None:
        return off, {}
    if not isinstance(value, dict) or "price" not in value:
        return off, {
            "interruptible": "interruptible must be a mapping with price (and noticeSeconds)."
        }
    errors = {
        f"interruptible.{key}": "unknown field." for key in sorted(set(value) - INTERRUPTIBLE_KEYS)
    }
    notice = value.get("noticeSeconds", DEFAULT_PREEMPTION_NOTICE_SECONDS)
    # A number, as terminationGracePeriodSeconds: YAML's "30", 1.5 or true would pass int().
    if isinstance(notice, bool) or not isinstance(notice, int):
        errors["interruptible.noticeSeconds"] = PREEMPTION_NOTICE_RANGE % {
            "value": json.dumps(notice, default=str)
        }
        notice = DEFAULT_PREEMPTION_NOTICE_SECONDS
    return {
        "interruptible": True,
        "interruptible_price": _text(value["price"]) or "0",
        "preemption_notice_seconds": notice,
    }, errors


def package_to_entry(package: Any) -> dict:
    """One package in the article's format; optional keys only when they carry a value."""
    entry: dict = {
        "id": package.id,
        "specName": package.spec_name,
        "cpu": package.cpu,
        "memory": package.memory,
        "gpu": package.gpu,
        "allocation": package.allocation,
    }
    if package.max_stop_after:
        entry["maxStopAfter"] = package.max_stop_after
    if package.ephemeral_storage:
        entry["ephemeralStorage"] = package.ephemeral_storage
    if package.termination_grace_seconds != DEFAULT_TERMINATION_GRACE_SECONDS:
        entry["terminationGracePeriodSeconds"] = package.termination_grace_seconds
    if package.regions:
        entry["regions"] = list(package.regions)
    if Decimal(package.price):
        entry["price"] = money(Decimal(package.price))
    if package.alternative_prices:
        entry["alternativePrices"] = dict(package.alternative_prices)
    if package.interruptible:
        entry["interruptible"] = {
            "price": money(Decimal(package.interruptible_price)),
            "noticeSeconds": package.preemption_notice_seconds,
        }
    if not package.active:
        entry["active"] = False
    return entry


class _QuotedStr(str):
    """Strings always quoted, so "10" stays a string and the output reads like the article."""


def _represent_quoted(dumper: yaml.SafeDumper, value: _QuotedStr) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # Indent list items under their key, as the article and kubectl write YAML.
        return super().increase_indent(flow, False)


_Dumper.add_representer(_QuotedStr, _represent_quoted)


def dump_document(entries: list[dict]) -> str:
    def quote(value: Any) -> Any:
        if isinstance(value, str):
            return _QuotedStr(value)
        if isinstance(value, dict):
            return {k: quote(v) for k, v in value.items()}
        if isinstance(value, list):
            return [quote(v) for v in value]
        return value

    return yaml.dump(
        {"packages": [quote(e) for e in entries]},
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1000,
    )
