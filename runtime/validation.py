"""Pure checks for what customers send: operation IDs, unit names, image references, templates."""

from __future__ import annotations

import re

OPERATION_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# Deletions get IDs of their own; '@' is not allowed in client IDs, so they never collide.
DELETE_OPERATION_PREFIX = "@delete-"
UNIT_NAME_MAX = 54  # so unit-<name>-gpu fits a 63-character name
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# OCI / Docker image reference grammar (distribution/reference), anchored.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
# Exactly what registries serve and pods pin: sha256 and 64 lower-case hex digits.
_DIGEST = r"sha256:[0-9a-f]{64}"
IMAGE_REFERENCE = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
RESERVED_ENV = {"SPEC_NAME", "UNIT_NAME", "GPU_COUNT"}
MAX_IMAGE = 512
MAX_ITEMS = 64
MAX_STRING = 4096


def operation_lookup_id(value: str) -> bool:
    """An ID an operation can have: a client's, or one the service gave a deletion."""
    return bool(OPERATION_ID.fullmatch(value.removeprefix(DELETE_OPERATION_PREFIX)))


def unit_name(value: str) -> str | None:
    if not value:
        return "name is required."
    if len(value) > UNIT_NAME_MAX:
        return f"name must be at most {UNIT_NAME_MAX} characters (unit-<name>-gpu must fit 63)."
    if not _LABEL.fullmatch(value):
        return (
            "name must be a DNS-1123 label: lower-case letters, digits and '-', starting and "
            "ending with a letter or digit."
        )
    return None


def image_registry(reference: str) -> str:
    """The registry an image is pulled from; Docker Hub when the reference names none."""
    match = IMAGE_REFERENCE.fullmatch(reference)
    domain = match.group("domain") if match else None
    first = reference.split("/", 1)[0]
    # As Docker does: the first component is a registry only if it looks like a host.
    if domain and ("." in first or ":" in first or first == "localhost"):
        return domain
    return "docker.io"


def image_reference(value: str, *, allowlist: list[str]) -> str | None:
    if not value:
        return "image is required."
    if len(value) > MAX_IMAGE or not IMAGE_REFERENCE.fullmatch(value):
        return (
            f'"{value}" is not a valid image reference '
            '(e.g. "python:3.12" or "ghcr.io/org/app@sha256:...").'
        )
    if allowlist and image_registry(value) not in allowlist:
        return (
            f"images must come from one of: {', '.join(allowlist)} "
            f"(this one is from {image_registry(value)})."
        )
    return None


def _storable(text: str) -> bool:
    """Postgres text holds neither NUL nor lone surrogates (which JSON can still carry)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def template(value: object) -> dict[str, str]:
    """Problems with a `template` object, keyed by field path; empty when valid."""
    if not isinstance(value, dict):
        return {"template": "template must be an object with command, args and env."}
    problems: dict[str, str] = {}
    for key in sorted(set(value) - {"command", "args", "env"}):
        problems[f"template.{key}"] = "unknown field."
    for key in ("command", "args"):
        items = value.get(key, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            problems[f"template.{key}"] = f"{key} must be a list of strings."
        elif len(items) > MAX_ITEMS or any(len(i) > MAX_STRING for i in items):
            problems[f"template.{key}"] = f"at most {MAX_ITEMS} items of {MAX_STRING} characters."
        elif not all(_storable(i) for i in items):
            problems[f"template.{key}"] = "strings may not contain NUL or unpaired surrogates."
    env = value.get("env", [])
    if not isinstance(env, list) or len(env) > MAX_ITEMS:
        problems["template.env"] = f"env must be a list of at most {MAX_ITEMS} {{name, value}}."
        return problems
    seen: set[str] = set()
    for index, entry in enumerate(env):
        where = f"template.env[{index}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "value"}:
            problems[where] = "each env entry is {name, value}."
            continue
        name, val = entry.get("name"), entry.get("value", "")
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name) or len(name) > 256:
            problems[f"{where}.name"] = "not a valid environment variable name."
        elif name in RESERVED_ENV:
            problems[f"{where}.name"] = f"{name} is set by the control plane."
        elif name in seen:
            problems[f"{where}.name"] = f"{name} is listed twice."
        if not isinstance(val, str) or len(val) > MAX_STRING or not _storable(val):
            problems[f"{where}.value"] = (
                f"value must be a string of at most {MAX_STRING} characters, without NUL."
            )
        if isinstance(name, str):
            seen.add(name)
    return problems
