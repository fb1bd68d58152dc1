"""The idioms every caller of the cluster needs, written once: create an object by its
deterministic name or adopt the one already there (kopf's create-or-adopt), and make sure an
object exists and says what we want (create, else patch or replace what drifted)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from controlplane.kube.client import Kind, create, get, merge_patch, replace
from controlplane.kube.errors import KubeError, PermanentError, TemporaryError


def create_or_adopt(kind: Kind, body: dict, *, ours: Callable[[dict], bool]) -> dict:
    """Create the object; if one of that name exists and `ours` says it is ours, use it. An
    object of that name that is not ours is never touched: that is a permanent error, as is
    any rejection of the create other than 409. Returns the object as the server has it."""
    metadata = body["metadata"]
    namespace, name = metadata.get("namespace"), metadata["name"]
    try:
        return create(kind, namespace, body)
    except KubeError as exc:
        if exc.status != 409:
            raise
    existing = get(kind, namespace, name)
    if existing is None:  # deleted between our create and get: try again shortly
        raise TemporaryError(f"{kind.kind} {name} vanished while adopting", delay=1)
    if (existing.get("metadata") or {}).get("deletionTimestamp"):
        raise TemporaryError(f"a previous {kind.kind} {name} is still being deleted", delay=2)
    if not ours(existing):
        raise PermanentError(
            f"{kind.kind} {namespace}/{name} already exists and is not managed by this control "
            "plane",
            status=409,
            reason="NameInUse",
        )
    return existing


def _at(obj: dict, path: Sequence[str]) -> Any:
    for key in path:
        obj = (obj or {}).get(key) or {}
    return obj


def _nested(path: Sequence[str], value: Any) -> dict:
    for key in reversed(path):
        value = {key: value}
    return value


def ensure(
    kind: Kind,
    body: dict,
    *,
    fields: Sequence[Sequence[str]] = (),
    exact_fields: Sequence[Sequence[str]] = (),
    replace_all: bool = False,
) -> dict:
    """Create `body`, or bring the object already there in line with it: with `fields` (paths
    to mappings such as ("metadata", "labels") or ("spec", "hard")), merge-patch each one whose
    keys do not all hold body's values (keys we do not set are left alone); `exact_fields`
    likewise, and keys we do not set are removed; with `replace_all`, replace the whole object
    (at its current resourceVersion). Returns the object as the server has it."""
    metadata = body["metadata"]
    namespace, name = metadata.get("namespace"), metadata["name"]
    try:
        return create(kind, namespace, body)
    except KubeError as exc:
        if exc.status != 409:
            raise
    current = get(kind, namespace, name)
    if current is None:  # deleted between our create and get: try again shortly
        raise TemporaryError(f"{kind.kind} {name} vanished while ensuring it", delay=1)
    if replace_all:
        resource_version = (current.get("metadata") or {}).get("resourceVersion")
        updated = {**body, "metadata": {**metadata, "resourceVersion": resource_version}}
        return replace(kind, namespace, name, updated)
    patch: dict = {}
    for path in fields:
        wanted, found = _at(body, path), _at(current, path)
        if any(found.get(key) != value for key, value in wanted.items()):
            patch = _merge(patch, _nested(path, wanted))
    for path in exact_fields:
        wanted, found = _at(body, path), _at(current, path)
        if found != wanted:
            extra = {key: None for key in found if key not in wanted}  # null removes
            patch = _merge(patch, _nested(path, {**extra, **wanted}))
    return merge_patch(kind, namespace, name, patch) if patch else current


def _merge(into: dict, other: dict) -> dict:
    merged = dict(into)
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged
