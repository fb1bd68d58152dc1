"""Pure validators for the package contract's DRA parts (CEL selectors, capacity requests);
names and quantities are controlplane.validation's. Each returns an error message or None, so
callers can report every field at once.
"""

from __future__ import annotations

from collections.abc import Iterable

import dracel
from controlplane.validation import qualified_name
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
