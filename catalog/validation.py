"""Pure validators for the package contract's DRA parts (CEL selectors, capacity requests);
names and quantities are controlplane.validation's. Each returns an error message or None, so
callers can report every field at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation

import dracel
from controlplane.validation import dns_label, dns_subdomain, fold_case, qualified_name
from dracel import quantity

# A CEL parser's error line: `ERROR: <input>:1:20: Syntax error: mismatched input '==' ...`.
CEL_ERROR = re.compile(r"ERROR: <input>:(?P<line>\d+):(?P<column>\d+): (?P<what>[^\n]*)")


def cel_syntax_problem(message: str) -> str:
    """A CEL parser's output as a sentence: where, and what, from its first syntax error
    (the list of tokens it expected left out)."""
    found = list(CEL_ERROR.finditer(message))
    chosen = next((m for m in found if "Syntax error" in m["what"]), found[0] if found else None)
    if chosen is None:
        return "it is not valid CEL"
    what = chosen["what"].removeprefix("Syntax error: ").split(" expecting ")[0].rstrip(".")
    return f"not valid CEL at column {chosen['column']}: {what}"


def cel_expressions(expressions: Iterable[object]) -> str | None:
    """Every selector must be a non-empty string that compiles and type-checks as a device
    selector (a boolean over `device`), as the API server requires. Selectors are counted from
    1, as the lines they are typed on."""
    problems = []
    for number, expression in enumerate(expressions, start=1):
        if not isinstance(expression, str) or not expression.strip():
            problems.append(f"Selector {number} must be a non-empty CEL expression.")
            continue
        try:
            problem = dracel.type_check(expression)
        except dracel.CelCompileError as exc:
            problems.append(
                f"Selector {number} ({expression[:80]}) is {cel_syntax_problem(str(exc))}."
            )
            continue
        if problem:
            problems.append(f"Selector {number} ({expression[:80]}): {problem}.")
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
            quantity.parse(str(value).strip())  # the API server trims JSON quantities too
        except ValueError as exc:
            problems.append(f"capacity {key}: {exc}")
    return " ".join(problems) or None


MAX_ALTERNATIVES = 7  # with the package's own class: the 8 subrequests firstAvailable takes
PRIMARY_ALTERNATIVE = "primary"  # the subrequest name of the package's own class


def alternatives(value: object) -> tuple[list[dict], str | None]:
    """Fallback alternatives normalised (`{name, deviceClassName, count, selectors?,
    capacity?}`, names lower-cased) and their problems: each a DNS-label name, unique and
    not "primary", a device class, a count of at least 1, selectors and capacity as the
    package's own are checked."""
    if value in (None, []):
        return [], None
    if not isinstance(value, list):
        return [], "alternatives must be a list of {name, deviceClassName, count}."
    if len(value) > MAX_ALTERNATIVES:
        return [], f"at most {MAX_ALTERNATIVES} alternatives (8 with the package's own class)."
    normalised: list[dict] = []
    problems: list[str] = []
    seen = {PRIMARY_ALTERNATIVE}
    for index, item in enumerate(value):
        where = f"alternative {index}"
        if not isinstance(item, dict):
            problems.append(f"{where} must be a mapping.")
            continue
        unknown = sorted(set(item) - {"name", "deviceClassName", "count", "selectors", "capacity"})
        if unknown:
            problems.append(f"{where}: unknown field {', '.join(unknown)}.")
        name = fold_case(str(item.get("name") or "").strip())
        device_class = str(item.get("deviceClassName") or "").strip()
        count = item.get("count")
        if problem := dns_label(name):
            problems.append(f"{where} name: {problem}")
        elif name in seen:
            problems.append(f"{where} name {name} is used twice (or is the reserved primary).")
        seen.add(name)
        if problem := dns_subdomain(device_class):
            problems.append(f"{where} deviceClassName: {problem}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            problems.append(f"{where} count must be a whole number of at least 1.")
        selectors = item.get("selectors") or []
        if not isinstance(selectors, list):
            problems.append(f"{where} selectors must be a list of CEL expressions.")
        elif problem := cel_expressions(selectors):
            problems.append(f"{where}: {problem}")
        capacity = item.get("capacity") or {}
        if problem := capacity_requests(capacity):
            problems.append(f"{where}: {problem}")
        entry: dict = {"name": name, "deviceClassName": device_class, "count": count}
        if selectors:
            entry["selectors"] = list(selectors)
        if capacity:
            entry["capacity"] = {str(k): str(v).strip() for k, v in capacity.items()}
        normalised.append(entry)
    return normalised, " ".join(problems) or None


def match_attribute(value: str) -> str | None:
    """A constraint's attribute: a fully qualified name `<domain>/<name>` (the API server
    requires the domain), or nothing."""
    if not value:
        return None
    domain, slash, name = value.partition("/")
    if not slash or not domain or not name:
        return f'"{value}" must be fully qualified, e.g. "gpu.nvidia.com/parentUUID".'
    if problem := dns_subdomain(domain):
        return f"matchAttribute domain: {problem}"
    if problem := qualified_name(name):
        return f"matchAttribute name: {problem}"
    return None


def money(value: Decimal) -> str:
    """A price as ops write it: at least two decimals, no trailing zeros beyond them."""
    text = f"{value.normalize():f}"
    whole, _, fraction = text.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def alternative_prices(value: object, names: Iterable[object]) -> tuple[dict, str | None]:
    """Prices per fallback alternative normalised (`{name: "1.20"}`) and their problems: each
    name one of the package's alternatives, each price a non-negative decimal with at most
    four places (the price field's)."""
    if value in (None, {}, ""):
        return {}, None
    if not isinstance(value, dict):
        return (
            {},
            "alternative prices must be a mapping of alternative name to price, "
            'e.g. {"l40s": "1.20"}.',
        )
    known = {name for name in names if isinstance(name, str)}
    normalised: dict[str, str] = {}
    problems: list[str] = []
    for raw_name, raw_price in value.items():
        name = fold_case(str(raw_name).strip())
        if name not in known:
            problems.append(f"{name} is not one of the package's alternatives.")
            continue
        if isinstance(raw_price, bool) or not isinstance(raw_price, (str, int)):
            problems.append(f'{name}: the price must be a decimal string, e.g. "1.20".')
            continue
        try:
            price = Decimal(str(raw_price).strip())
        except InvalidOperation:
            problems.append(f"{name}: {raw_price!r} is not a price.")
            continue
        if not price.is_finite() or price < 0 or price.as_tuple().exponent < -4:  # type: ignore[operator]
            problems.append(f"{name}: a price is at least 0 with at most four decimal places.")
            continue
        normalised[name] = money(price)
    return normalised, " ".join(problems) or None
