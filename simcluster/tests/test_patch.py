"""Patch semantics: RFC 7386 merge, RFC 6902 JSON patch and schema-driven strategic merge."""

from __future__ import annotations

from typing import Any

import pytest

from simcluster.errors import ApiError
from simcluster.patch import json_patch, merge_patch, strategic_merge_patch
from simcluster.validation import schemas_for

SCHEMAS = schemas_for("1.36")


def _smp(
    kind: str, api_version: str, target: dict[str, Any], patch: dict[str, Any]
) -> dict[str, Any]:
    return strategic_merge_patch(target, patch, SCHEMAS.root(kind, api_version), SCHEMAS.resolve)


POD = {
    "metadata": {"name": "p", "finalizers": ["a", "b"]},
    "spec": {
        "containers": [
            {"name": "a", "image": "img:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "img:1"},
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
        "tolerations": [{"key": "t"}],
    },
}


def test_merge_patch_merges_maps_and_deletes_nulls() -> None:
    result = merge_patch({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": None, "d": 3}, "l": [3]})

    assert result == {"a": {"c": 2, "d": 3}, "l": [3]}


def test_json_patch_applies_operations_in_order() -> None:
    operations = [
        {"op": "add", "path": "/l/-", "value": 3},
        {"op": "replace", "path": "/a/b", "value": 9},
        {"op": "copy", "from": "/a/b", "path": "/c"},
        {"op": "remove", "path": "/l/0"},
        {"op": "test", "path": "/c", "value": 9},
    ]

    assert json_patch({"a": {"b": 1}, "l": [1, 2]}, operations) == {
        "a": {"b": 9},
        "l": [2, 3],
        "c": 9,
    }


def test_json_patch_fails_when_test_does_not_hold() -> None:
    with pytest.raises(ApiError) as exc_info:
        json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])

    assert exc_info.value.code == 422


def test_strategic_merge_merges_list_items_by_merge_key() -> None:
    result = _smp(
        "Pod",
        "v1",
        POD,
        {"spec": {"containers": [{"name": "b", "image": "img:2"}, {"name": "c", "image": "new"}]}},
    )

    assert [(c["name"], c["image"]) for c in result["spec"]["containers"]] == [
        ("a", "img:1"),
        ("b", "img:2"),
        ("c", "new"),
    ]
    assert result["spec"]["containers"][0]["env"] == [{"name": "X", "value": "1"}]


def test_strategic_merge_honours_directives() -> None:
    patch = {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "finalizers": ["c"]},
        "spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
            "containers": [{"name": "a", "$patch": "delete"}],
            "volumes": [
                {"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}
            ],
            "tolerations": [{"key": "u"}],
        },
    }

    result = _smp("Pod", "v1", POD, patch)

    assert [c["name"] for c in result["spec"]["containers"]] == ["b"]
    assert result["metadata"]["finalizers"] == ["b", "c"]
    assert result["spec"]["volumes"] == [{"name": "v", "hostPath": {"path": "/x"}}]
    assert result["spec"]["tolerations"] == [{"key": "u"}]  # atomic list: replaced


def test_strategic_merge_set_element_order_reorders() -> None:
    patch = {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}}

    result = _smp("Pod", "v1", POD, patch)

    assert [c["name"] for c in result["spec"]["containers"]] == ["b", "a"]


def test_strategic_merge_replace_directive_replaces_whole_list() -> None:
    patch = {"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z"}]}}

    assert _smp("Pod", "v1", POD, patch)["spec"]["containers"] == [{"name": "z", "image": "z"}]


def test_strategic_merge_of_claim_status_keys_reserved_for_on_uid() -> None:
    claim = {"status": {"reservedFor": [{"resource": "pods", "name": "a", "uid": "1"}]}}

    result = _smp(
        "ResourceClaim",
        "resource.k8s.io/v1",
        claim,
        {"status": {"reservedFor": [{"resource": "pods", "name": "b", "uid": "2"}]}},
    )

    assert [entry["uid"] for entry in result["status"]["reservedFor"]] == ["1", "2"]
