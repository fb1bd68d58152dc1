"""The pure side of device taints: toleration matching, eviction times, and which devices a
DeviceTaintRule taints (as the 1.34 ResourceSlice tracker matches them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from simcluster.allocator import Inventory
from simcluster.taints import TaintRules, all_tolerated, eviction_time, tolerates

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
ADDED = "2026-01-01T11:59:00Z"
TAINT = {"key": "example.com/xid", "value": "79", "effect": "NoExecute", "timeAdded": ADDED}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "example.com/xid", "operator": "Equal", "value": "79"}, True),
        ({"key": "example.com/xid", "value": "79"}, True),  # Equal is the default
        ({"key": "example.com/xid", "operator": "Equal", "value": "13"}, False),
        ({"key": "example.com/xid", "operator": "Exists"}, True),
        ({"key": "example.com/other", "operator": "Exists"}, False),
        ({"operator": "Exists"}, True),  # no key: every key
        ({"operator": "Exists", "effect": "NoExecute"}, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": "example.com/xid", "operator": "In", "value": "79"}, False),
    ],
)
def test_tolerates_follows_the_resourceclaim_rules(toleration: dict, expected: bool) -> None:
    assert tolerates(toleration, TAINT) is expected


def test_every_taint_must_be_tolerated() -> None:
    schedule = {"key": "example.com/ecc", "effect": "NoSchedule"}

    assert all_tolerated([TAINT, schedule], [{"operator": "Exists"}])
    assert not all_tolerated([TAINT, schedule], [{"key": "example.com/xid", "operator": "Exists"}])
    assert all_tolerated([], [])


def test_eviction_is_at_time_added_without_a_no_execute_toleration() -> None:
    added = datetime(2026, 1, 1, 11, 59, tzinfo=UTC)

    assert eviction_time([TAINT], [], NOW) == added
    # Only NoExecute tolerations count for the controller, even one matching every effect.
    assert eviction_time([TAINT], [{"operator": "Exists"}], NOW) == added
    assert eviction_time([{**TAINT, "effect": "NoSchedule"}], [], NOW) is None


def test_toleration_seconds_delay_and_the_shortest_wins() -> None:
    broad = {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    tolerations = [broad, {**broad, "key": "example.com/xid", "tolerationSeconds": 60}]
    negative = [{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -5}]
    forever = [{"operator": "Exists", "effect": "NoExecute"}]
    added = datetime(2026, 1, 1, 11, 59, tzinfo=UTC)

    assert eviction_time([TAINT], tolerations, NOW) == added + timedelta(seconds=60)
    assert eviction_time([TAINT], negative, NOW) == added
    assert eviction_time([TAINT], forever, NOW) is None


def _slice(pool: str, devices: list[str], driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pool}-slice", "uid": f"uid-{pool}", "resourceVersion": "1"},
        "spec": {
            "driver": driver,
            "nodeName": pool,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": name,
                    "attributes": {"productName": {"string": f"GPU {name}"}},
                    "taints": [{"key": "own", "effect": "NoSchedule"}] if name == "gpu-9" else [],
                }
                for name in devices
            ],
        },
    }


def _rule(name: str, selector: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": {"key": f"rule/{name}", "effect": "NoExecute"}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"metadata": {"name": name}, "spec": spec}


def _taints(rules: list[dict], classes: dict | None = None) -> dict[tuple, list[str]]:
    inventory = Inventory(
        [_slice("node-a", ["gpu-0", "gpu-9"]), _slice("node-b", ["gpu-0"])],
        taint_rules=TaintRules(rules, classes or {}),
    )
    return {key: [t["key"] for t in d.taints] for key, d in inventory.by_key.items()}


def test_rules_select_by_driver_pool_and_device_after_the_slice_taints() -> None:
    found = _taints(
        [
            _rule("by-device", {"pool": "node-a", "device": "gpu-9"}),
            _rule("by-pool", {"driver": "gpu.nvidia.com", "pool": "node-b"}),
            _rule("other-driver", {"driver": "gpu.example.com"}),
        ]
    )

    assert found == {
        ("gpu.nvidia.com", "node-a", "gpu-0"): [],
        ("gpu.nvidia.com", "node-a", "gpu-9"): ["own", "rule/by-device"],
        ("gpu.nvidia.com", "node-b", "gpu-0"): ["rule/by-pool"],
    }


def test_rules_select_by_device_class_and_cel() -> None:
    product = "device.attributes['gpu.nvidia.com'].productName"
    classes = {
        "nine": {
            "metadata": {"name": "nine"},
            "spec": {"selectors": [{"cel": {"expression": f"{product} == 'GPU gpu-9'"}}]},
        }
    }
    cel = {"selectors": [{"cel": {"expression": f"{product}.endsWith('0')"}}]}
    found = _taints(
        [
            _rule("class", {"deviceClassName": "nine"}),
            _rule("missing-class", {"deviceClassName": "absent"}),
            _rule("cel", {"pool": "node-b", **cel}),
            _rule(
                "cel-error", {"selectors": [{"cel": {"expression": "device.attributes['x'].y"}}]}
            ),
        ],
        classes,
    )

    assert found[("gpu.nvidia.com", "node-a", "gpu-9")] == ["own", "rule/class"]
    assert found[("gpu.nvidia.com", "node-a", "gpu-0")] == []
    assert found[("gpu.nvidia.com", "node-b", "gpu-0")] == ["rule/cel"]


def test_a_rule_without_a_selector_taints_every_device_as_1_34_does() -> None:
    found = _taints([_rule("everything", None)])

    assert all("rule/everything" in keys for keys in found.values())
