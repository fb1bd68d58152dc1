"""Pure validators for the package contract's DRA parts (CEL selectors, capacity requests);
names and quantities are controlplane.validation's. Each returns an error message or None, so
callers can report every field at once.
"""

from __future__ import annotations

from collections.abc import Iterable

import dracel
from controlplane.validation import dns_label, dns_subdomain, fold_case, qualified_name
from dracel import quantity


def cel_expressions(expressions: Iterable[object]) -> str | None:
    """Every selector must be a non-empty string that compiles and type-checks as a device
    selector (a boolean over `device`), as the API server requires."""
    problems = []
    for index, expression in enumerate(expressions):
        if not isinstance(expression, str) or not expression.strip():
            problems.append(f"selector {index} must be a non-empty CEL expression.")
            continue
        try:
            problem = dracel.type_check(expression)
        except dracel.CelCompileError as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else "syntax error"
            problems.append(f"selector {index} does not compile as CEL: {first_line}")
            continue
        if problem:
            problems.append(f"selector {index} ({expression[:80]}): {problem}.")
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
