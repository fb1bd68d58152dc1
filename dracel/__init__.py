"""The Kubernetes DRA CEL environment: device selectors as DeviceClasses and ResourceClaim
requests use them, evaluated with the `common-expression-language` package plus the Kubernetes
quantity and semver helpers.

Pure and framework-free, so the control plane's inventory and the simulated cluster judge
device-class membership with exactly the same code."""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from dracel import engine, quantity
from dracel.engine import add_stdlib_to_context

logger = logging.getLogger(__name__)

# cel-rust has no custom value types, so a Quantity travels as a one-key map holding its value
# in canonical decimal form: equal quantities ("1Gi", "1024Mi") are then equal maps, and the
# helpers below can tell a quantity from a version (versions are plain strings).
QUANTITY_KEY = "__quantity__"

# `device.attributes["other.domain"]` yields an empty map in Kubernetes rather than an error;
# the domains an expression names are pre-seeded as empty maps to give the same result.
_DOMAIN_REFERENCE = re.compile(r"""\b(?:attributes|capacity)\s*\[\s*(["'])([^"']+)\1\s*\]""")
# What a selector can learn about a device, when it reads nothing but named values: the driver
# and `device.attributes["<domain>"].<name>` or `device.capacity["<domain>"]["<name>"]` (not a
# method call on the map). Anything else naming `device` (the map itself, `in`, a macro over its
# keys) may see every attribute.
_DRIVER_READ = re.compile(r"\bdevice\s*\.\s*driver\b")
_VALUE_READ = re.compile(
    r"""\bdevice\s*\.\s*(attributes|capacity)\s*\[\s*(["'])([^"'\\]+)\2\s*\]\s*"""
    r"""(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()|\[\s*(["'])([^"'\\]+)\5\s*\])"""
)
_DEVICE = re.compile(r"\bdevice\b")
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


class CelCompileError(ValueError):
    """A selector expression that does not parse."""


Read = tuple[str, str, str]  # ("attributes" | "capacity", domain, name)


@dataclass(frozen=True)
class CompiledSelector:
    """One parsed `cel.expression`, the attribute/capacity domains it names, and the values
    it reads (None: it may read any of them)."""

    expression: str
    program: engine.Program
    domains: tuple[str, ...]
    reads: frozenset[Read] | None = None


def _reads(expression: str, program: engine.Program) -> frozenset[Read] | None:
    if set(program.variables()) - {"device"}:
        return None  # a comprehension (all, exists, map, filter) may walk a map's keys
    found = {
        (m.group(1), m.group(3), m.group(4) or m.group(6)) for m in _VALUE_READ.finditer(expression)
    }
    rest = _DRIVER_READ.sub(" ", _VALUE_READ.sub(" ", expression))
    return None if _DEVICE.search(rest) else frozenset(found)


def reads(selectors: Iterable[CompiledSelector]) -> frozenset[Read] | None:
    """Every value these selectors read besides the driver, or None when one may read more."""
    found: set[Read] = set()
    for selector in selectors:
        if selector.reads is None:
            return None
        found |= selector.reads
    return frozenset(found)


def device_key(driver: str, device: dict[str, Any], read: Iterable[Read]) -> tuple:
    """What selectors that read only `read` (see `reads`) see of a ResourceSlice device: two
    devices with equal keys match exactly the same of them, so one evaluation serves both."""
    key: list[Any] = [driver]
    for kind, names in _entry_names(driver, tuple(read)):
        entries = device.get(kind) or {}
        # repr of JSON-shaped values: equal text means equal values (the converse need not
        # hold: an unlucky key order only costs another evaluation).
        key.extend(repr(entries.get(name)) for name in names)
    return tuple(key)


@functools.lru_cache(maxsize=256)
def _entry_names(driver: str, read: tuple[Read, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Where each read value may sit in a device entry: "<domain>/<name>", and plain "<name>"
    in the driver's own domain."""
    return tuple(
        (kind, (f"{domain}/{name}", name) if domain == driver else (f"{domain}/{name}",))
        for kind, domain, name in read
    )


def quantity_value(text: str) -> dict[str, str]:
    """The CEL representation of a Kubernetes Quantity string such as "40Gi" or "500m"."""
    try:
        amount = quantity.parse(text)
    except ValueError as exc:
        raise ValueError(f"invalid quantity {text!r}") from exc
    return _quantity_of(amount)


def _as_decimal(value: Any) -> Decimal:
    if isinstance(value, dict) and QUANTITY_KEY in value:
        return Decimal(value[QUANTITY_KEY])
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    raise TypeError(f"no such overload: expected a quantity, got {type(value).__name__}")


SemverKey = tuple[int, int, int, bool, tuple[tuple[int, int | str], ...]]


def _semver_key(text: Any) -> SemverKey:
    """Sort key with semver precedence: a release sorts after its pre-releases, numeric
    pre-release identifiers before alphanumeric ones; build metadata is ignored."""
    if not isinstance(text, str):
        raise TypeError(f"no such overload: expected a semver, got {type(text).__name__}")
    match = _SEMVER.match(text)
    if match is None:
        raise ValueError(f"invalid semver {text!r}")
    major, minor, patch, pre, _build = match.groups()
    identifiers = tuple((0, int(p)) if p.isdigit() else (1, p) for p in (pre or "").split(".") if p)
    return int(major), int(minor), int(patch), not identifiers, identifiers


def _compare(left: Any, right: Any) -> int:
    """`compareTo` for both libraries Kubernetes registers it in: quantities and semvers."""
    a: Any
    b: Any
    if isinstance(left, str) or isinstance(right, str):
        a, b = _semver_key(left), _semver_key(right)
    else:
        a, b = _as_decimal(left), _as_decimal(right)
    return (a > b) - (a < b)


def _semver(text: str, normalize: bool = False) -> str:
    if normalize:
        text = _normalize_semver(text)
    _semver_key(text)
    return text


def _normalize_semver(text: str) -> str:
    """What `semver(s, true)` accepts beyond strict semver: a "v" prefix, missing minor or
    patch, and leading zeros."""
    match = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$", text)
    if match is None:
        return text
    major, minor, patch, rest = match.groups()
    return f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}{rest}"


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _semver(text, normalize)
    except ValueError:
        return False
    return True


def _as_integer(value: Any) -> int:
    amount = _as_decimal(value)
    if amount != amount.to_integral_value():
        raise ValueError("cannot convert a fractional quantity to an integer")
    return int(amount)


def _is_integer(value: Any) -> bool:
    amount = _as_decimal(value)
    return amount == amount.to_integral_value()


def _quantity_of(amount: Decimal) -> dict[str, str]:
    return {QUANTITY_KEY: format(amount.normalize(), "f")}


def _sign(value: Any) -> int:
    amount = _as_decimal(value)
    return (amount > 0) - (amount < 0)


def _version_part(index: int) -> Any:
    def part(value: str) -> int:
        return _semver_key(value)[index]  # type: ignore[return-value]

    return part


_KUBERNETES_FUNCTIONS: dict[str, Any] = {
    "quantity": quantity_value,
    "isQuantity": quantity.is_quantity,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "sign": _sign,
    "add": lambda a, b: _quantity_of(_as_decimal(a) + _as_decimal(b)),
    "sub": lambda a, b: _quantity_of(_as_decimal(a) - _as_decimal(b)),
    "asInteger": _as_integer,
    "isInteger": _is_integer,
    "asApproximateFloat": lambda q: float(_as_decimal(q)),
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _version_part(0),
    "minor": _version_part(1),
    "patch": _version_part(2),
    "find": lambda s, pattern: m.group(0) if (m := re.search(pattern, s)) else "",
    "findAll": lambda s, pattern, limit=-1: re.findall(pattern, s)[: limit if limit >= 0 else None],
}

_local = threading.local()


def _context() -> engine.Context:
    # engine.Context is not thread-safe and is cheapest when reused, so keep one per thread.
    context = getattr(_local, "context", None)
    if context is None:
        context = engine.Context()
        add_stdlib_to_context(context)
        for name, function in _KUBERNETES_FUNCTIONS.items():
            context.add_function(name, function)
        _local.context = context
    return context


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> CompiledSelector:
    """Parse one selector expression (cached by its text); raises CelCompileError."""
    try:
        program = engine.compile(expression)
    except (ValueError, RuntimeError) as exc:
        raise CelCompileError(f"CEL compile error: {exc}") from exc
    domains = tuple(sorted({m.group(2) for m in _DOMAIN_REFERENCE.finditer(expression)}))
    return CompiledSelector(
        expression=expression,
        program=program,
        domains=domains,
        reads=_reads(expression, program),
    )


# Names a macro binds for its body: `list.all(x, ...)`, `map.exists(k, ...)` and the rest.
_MACRO_VARIABLE = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,"
)
# A device with nothing in it: what a selector returns for it shows its result type wherever
# that type does not depend on the device's values.
_PROBE_DEVICE = {"driver": "", "attributes": {}, "capacity": {}}


def type_check(expression: str) -> str | None:
    """What the API server's CEL type check refuses in a device selector, as far as it can be
    told without a checker (cel-rust has none): a name other than `device` (or a macro's
    variable), and a result that is not a boolean (`"abc"`, `device.driver`). A selector that
    only may fail at run time (a missing attribute) passes, as it does in Kubernetes.
    Raises CelCompileError when it does not parse; returns the problem or None."""
    selector = compile_selector(expression)
    bound = set(_MACRO_VARIABLE.findall(expression))
    undeclared = sorted(set(selector.program.variables()) - {"device"} - bound)
    if undeclared:
        return f"undeclared reference to {', '.join(undeclared)} (the only variable is device)"
    try:
        evaluate(selector, _PROBE_DEVICE)
    except CelRuntimeError as exc:
        if "expression returned" in str(exc):
            kind = str(exc).rsplit(" ", 1)[-1]
            return f"must evaluate to bool, not {_CEL_TYPE_NAMES.get(kind, kind)}"
    return None


_CEL_TYPE_NAMES = {"str": "string", "dict": "map", "list": "list", "float": "double"}


def device_env(driver: str, device: dict[str, Any]) -> dict[str, Any]:
    """The `device` variable for one ResourceSlice device entry: attributes and capacity keyed by
    domain (unqualified names belong to the driver's domain); versions become plain strings."""
    attributes: dict[str, dict[str, Any]] = {}
    for qualified_name, attribute in (device.get("attributes") or {}).items():
        domain, name = _split_name(qualified_name, driver)
        value: Any = None
        for kind in ("string", "int", "bool", "version"):
            if kind in attribute:
                value = attribute[kind]
                break
        attributes.setdefault(domain, {})[name] = value
    capacity: dict[str, dict[str, Any]] = {}
    for qualified_name, entry in (device.get("capacity") or {}).items():
        domain, name = _split_name(qualified_name, driver)
        try:
            capacity.setdefault(domain, {})[name] = quantity_value(str(entry.get("value", "0")))
        except ValueError:
            logger.debug("ignoring unparsable capacity %s=%r", qualified_name, entry)
    return {"driver": driver, "attributes": attributes, "capacity": capacity}


def _split_name(qualified_name: str, driver: str) -> tuple[str, str]:
    domain, _, name = qualified_name.rpartition("/")
    return (domain or driver), name


def _with_domains(env: dict[str, Any], domains: Iterable[str]) -> dict[str, Any]:
    missing_attributes = [d for d in domains if d not in env["attributes"]]
    missing_capacity = [d for d in domains if d not in env["capacity"]]
    if not missing_attributes and not missing_capacity:
        return env
    return {
        **env,
        "attributes": {**env["attributes"], **{domain: {} for domain in missing_attributes}},
        "capacity": {**env["capacity"], **{domain: {} for domain in missing_capacity}},
    }


class CelRuntimeError(RuntimeError):
    """A selector that failed while evaluating against one device."""


def _execute(selector: CompiledSelector, context: engine.Context) -> bool:
    try:
        result = selector.program.execute(context)
    except KeyError as exc:
        raise CelRuntimeError(f"CEL runtime error: no such key: {exc.args[0]}") from exc
    except (TypeError, ValueError, RuntimeError) as exc:
        raise CelRuntimeError(f"CEL runtime error: {exc}") from exc
    if not isinstance(result, bool):
        raise CelRuntimeError(f"CEL runtime error: expression returned {type(result).__name__}")
    return result


def _bind_device(env: dict[str, Any], selectors: Sequence[CompiledSelector]) -> engine.Context:
    # Converting the device into CEL values is the costly step: do it once for all selectors.
    context = _context()
    domains = {domain for selector in selectors for domain in selector.domains}
    context.add_variable("device", _with_domains(env, domains))
    return context


def evaluate(selector: CompiledSelector, env: dict[str, Any]) -> bool:
    """Run one selector against a device env. A runtime error (a missing attribute, a type
    mismatch) raises CelRuntimeError; a non-bool result is an error too, as in Kubernetes."""
    return _execute(selector, _bind_device(env, [selector]))


def _all_match(selectors: Sequence[CompiledSelector], context: engine.Context, driver: Any) -> bool:
    for selector in selectors:
        try:
            if not _execute(selector, context):
                return False
        except CelRuntimeError as exc:
            logger.debug("selector %r on %s: %s", selector.expression, driver, exc)
            return False
    return True


def matching_sets(
    selector_sets: Mapping[str, Sequence[CompiledSelector]], env: dict[str, Any]
) -> set[str]:
    """The names of the selector sets (e.g. device classes) whose selectors all match the
    device. The device is bound into CEL once for all of them, the costly step."""
    everything = [selector for selectors in selector_sets.values() for selector in selectors]
    context = _bind_device(env, everything)
    return {
        name
        for name, selectors in selector_sets.items()
        if _all_match(selectors, context, env.get("driver"))
    }


class SelectorRuntimeError(CelRuntimeError):
    """A runtime error of one selector of a list, with its position there (`selector #<n>`)."""

    def __init__(self, message: str, *, index: int, expression: str) -> None:
        super().__init__(message)
        self.index = index
        self.expression = expression


def device_selected(selectors: Sequence[CompiledSelector], env: dict[str, Any]) -> bool:
    """True when every selector matches, evaluated in order up to the first that does not, as
    the scheduler's allocator does. A runtime error raises SelectorRuntimeError: the real
    allocator aborts the attempt and reports it rather than skipping the device."""
    if not selectors:
        return True
    context = _bind_device(env, selectors)
    for index, selector in enumerate(selectors):
        try:
            if not _execute(selector, context):
                return False
        except CelRuntimeError as exc:
            raise SelectorRuntimeError(
                str(exc), index=index, expression=selector.expression
            ) from exc
    return True


def device_matches(selectors: Sequence[CompiledSelector], env: dict[str, Any]) -> bool:
    """True when every selector matches. A runtime error counts as "no match": the real
    scheduler aborts the scheduling attempt instead, which a simulator gains nothing from."""
    if not selectors:
        return True
    return _all_match(selectors, _bind_device(env, selectors), env.get("driver"))


__all__ = [
    "QUANTITY_KEY",
    "CelCompileError",
    "CelRuntimeError",
    "CompiledSelector",
    "SelectorRuntimeError",
    "compile_selector",
    "device_env",
    "device_key",
    "device_matches",
    "device_selected",
    "evaluate",
    "matching_sets",
    "quantity_value",
    "reads",
    "type_check",
]
