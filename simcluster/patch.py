"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.

Strategic merge follows the patch strategies and merge keys declared in the official schemas
(`x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key`), so kubectl's client-side
apply patches (`$setElementOrder/`, `$patch`, `$retainKeys`, `$deleteFromPrimitiveList/`)
merge lists such as containers and env by name instead of replacing them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from simcluster.errors import ApiError

# Resolves a schema node's `$ref` and returns the node (or None when the path has no schema).
SchemaResolver = Callable[[dict[str, Any] | None], dict[str, Any] | None]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _decode_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ApiError(
            422, "Invalid", f"the server rejected our request: invalid JSON pointer {pointer!r}"
        )
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def _container(doc: Any, parts: list[str]) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[_index(node, part, existing=True)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise _patch_failed(f"doc is missing path: /{'/'.join(parts)}")
    return node, parts[-1]


def _index(array: list, part: str, *, existing: bool) -> int:
    if part == "-" and not existing:
        return len(array)
    try:
        index = int(part)
    except ValueError:
        raise _patch_failed(f"invalid array index {part!r}") from None
    limit = len(array) if existing else len(array) + 1
    if not 0 <= index < limit:
        raise _patch_failed(f"array index {index} out of bounds")
    return index


def _patch_failed(message: str) -> ApiError:
    return ApiError(
        422, "Invalid", f"the server rejected our request due to an error in our request: {message}"
    )


def _get(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts:
        if isinstance(node, list):
            node = node[_index(node, part, existing=True)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise _patch_failed(f"doc is missing path: /{'/'.join(parts)}")
    return node


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent, last = _container(doc, parts)
    if isinstance(parent, list):
        parent.insert(_index(parent, last, existing=False), value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise _patch_failed(f"doc is missing path: /{'/'.join(parts)}")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    parent, last = _container(doc, parts)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, existing=True))
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    raise _patch_failed(f"unable to remove nonexistent key: {last}: missing value")


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 operations applied in order; a failing `test` rejects the whole patch."""
    if not isinstance(operations, list):
        raise ApiError.bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise ApiError.bad_request(f"invalid json patch operation: {operation!r}")
        op, parts = operation["op"], _decode_pointer(operation["path"])
        if op == "add":
            doc = _add(doc, parts, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            _remove(doc, parts)
        elif op == "replace":
            _get(doc, parts)
            if parts:
                parent, last = _container(doc, parts)
                index = _index(parent, last, existing=True) if isinstance(parent, list) else last
                parent[index] = copy.deepcopy(operation.get("value"))
            else:
                doc = copy.deepcopy(operation.get("value"))
        elif op in ("move", "copy"):
            source = _decode_pointer(operation.get("from", ""))
            value = _remove(doc, source) if op == "move" else copy.deepcopy(_get(doc, source))
            doc = _add(doc, parts, value)
        elif op == "test":
            if _get(doc, parts) != operation.get("value"):
                raise _patch_failed(f"testing value {operation['path']} failed")
        else:
            raise ApiError.bad_request(f"unexpected json patch operation {op!r}")
    return doc


_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_ORDER_PREFIX = "$setElementOrder/"
_DELETE_PRIMITIVE_PREFIX = "$deleteFromPrimitiveList/"


def strategic_merge_patch(
    target: dict[str, Any],
    patch: dict[str, Any],
    schema: dict[str, Any] | None,
    resolve: SchemaResolver,
) -> dict[str, Any]:
    """Apply a strategic merge patch to `target` guided by the object's schema node."""
    if not isinstance(patch, dict):
        raise ApiError.bad_request("strategic merge patch must be a JSON object")
    return _merge_map(copy.deepcopy(target), patch, resolve(schema), resolve)


def _property_schema(
    schema: dict[str, Any] | None, key: str, resolve: SchemaResolver
) -> dict | None:
    if not schema:
        return None
    properties = schema.get("properties")
    if properties and key in properties:
        return resolve(properties[key])
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        return resolve(additional)
    return None


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: _strip_directives(item) for key, item in value.items() if not key.startswith("$")
        }
    if isinstance(value, list):
        return [
            _strip_directives(item)
            for item in value
            if not (isinstance(item, dict) and set(item) == {_DIRECTIVE})
        ]
    return value


def _merge_map(
    original: dict[str, Any], patch: dict[str, Any], schema: dict | None, resolve: SchemaResolver
) -> dict[str, Any]:
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return _strip_directives({k: v for k, v in patch.items() if k != _DIRECTIVE})
    if directive == "delete":
        return {}
    if _RETAIN_KEYS in patch:
        retained = set(patch[_RETAIN_KEYS] or [])
        original = {key: value for key, value in original.items() if key in retained}
    orders: dict[str, list] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS):
            continue
        if key.startswith(_ORDER_PREFIX):
            orders[key[len(_ORDER_PREFIX) :]] = value or []
            continue
        if key.startswith(_DELETE_PRIMITIVE_PREFIX):
            field = key[len(_DELETE_PRIMITIVE_PREFIX) :]
            removed = value or []
            if isinstance(original.get(field), list):
                original[field] = [item for item in original[field] if item not in removed]
            continue
        if value is None:
            original.pop(key, None)
            continue
        field_schema = _property_schema(schema, key, resolve)
        current = original.get(key)
        if isinstance(value, dict):
            if value.get(_DIRECTIVE) == "delete":
                original.pop(key, None)
            elif isinstance(current, dict):
                original[key] = _merge_map(current, value, field_schema, resolve)
            else:
                original[key] = _merge_map({}, value, field_schema, resolve)
        elif isinstance(value, list):
            original[key] = _merge_list(current, value, field_schema, resolve)
        else:
            original[key] = value
    for field, order in orders.items():
        if isinstance(original.get(field), list):
            field_schema = _property_schema(schema, field, resolve)
            original[field] = _apply_order(original[field], order, _merge_key(field_schema))
    return original


def _merge_key(schema: dict | None) -> str | None:
    return (schema or {}).get("x-kubernetes-patch-merge-key")


def _merges(schema: dict | None) -> bool:
    return "merge" in (schema or {}).get("x-kubernetes-patch-strategy", "").split(",")


def _merge_list(current: Any, patch: list, schema: dict | None, resolve: SchemaResolver) -> list:
    if any(isinstance(item, dict) and item.get(_DIRECTIVE) == "replace" for item in patch):
        return _strip_directives(
            [
                item
                for item in patch
                if not (isinstance(item, dict) and _DIRECTIVE in item and len(item) == 1)
            ]
        )
    if not isinstance(current, list) or not _merges(schema):
        return _strip_directives(patch)
    merge_key = _merge_key(schema)
    item_schema = resolve((schema or {}).get("items"))
    if merge_key is None:
        # Primitive lists with the merge strategy (finalizers) are set unions.
        merged = list(current)
        merged.extend(item for item in patch if item not in merged)
        return merged
    merged = list(current)
    for item in patch:
        if not isinstance(item, dict):
            continue
        key_value = item.get(merge_key)
        position = next(
            (
                i
                for i, existing in enumerate(merged)
                if isinstance(existing, dict) and existing.get(merge_key) == key_value
            ),
            None,
        )
        if item.get(_DIRECTIVE) == "delete":
            if position is not None:
                merged.pop(position)
        elif position is not None:
            merged[position] = _merge_map(merged[position], item, item_schema, resolve)
        else:
            merged.append(_merge_map({}, item, item_schema, resolve))
    return merged


def _apply_order(items: list, order: list, merge_key: str | None) -> list:
    """`$setElementOrder`: listed elements first in the given order, then any others."""

    def identity(item: Any) -> Any:
        return item.get(merge_key) if merge_key and isinstance(item, dict) else item

    wanted = [identity(entry) for entry in order]
    ranked = {value: rank for rank, value in enumerate(wanted)}
    listed = sorted(
        (item for item in items if identity(item) in ranked),
        key=lambda item: ranked[identity(item)],
    )
    return listed + [item for item in items if identity(item) not in ranked]
