"""The pure allocator: counting modes, pool generations and completeness, the one-node rule,
CPU/memory fit, pinned claims and the scheduler's failure wording."""

from __future__ import annotations

from typing import Any

import pytest

from simcluster.allocator import (
    Allocator,
    ClaimRequest,
    Inventory,
    NodeState,
    Placement,
    PodRequest,
    SchedulingError,
    Unschedulable,
    allocated_devices,
    allocation_node_selector,
)

MEMORY = "device.capacity['gpu.nvidia.com'].memory"
GPU_CLASS = {
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
}
BIG_CLASS = {
    "metadata": {"name": "big"},
    "spec": {"selectors": [{"cel": {"expression": f"{MEMORY}.compareTo(quantity('40Gi')) >= 0"}}]},
}
CLASSES = {"gpu.nvidia.com": GPU_CLASS, "big": BIG_CLASS}


def _slice(
    node: str,
    devices: int | list[str],
    *,
    generation: int = 1,
    slice_count: int = 1,
    memory: str = "80Gi",
    product: str = "NVIDIA H100 80GB HBM3",
    name: str | None = None,
    version: str = "1",
) -> dict[str, Any]:
    names = devices if isinstance(devices, list) else [f"gpu-{i}" for i in range(devices)]
    return {
        "metadata": {
            "name": name or f"{node}-slice-{generation}",
            "uid": f"uid-{node}",
            "resourceVersion": version,
        },
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": slice_count},
            "devices": [
                {
                    "name": device,
                    "attributes": {"productName": {"string": product}, "type": {"string": "gpu"}},
                    "capacity": {"memory": {"value": memory}},
                }
                for device in names
            ],
        },
    }


def _node(name: str, cpu: int = 64_000, memory: int = 256 * 2**30, **extra: Any) -> NodeState:
    return NodeState(
        name=name,
        labels={"kubernetes.io/hostname": name},
        cpu_free=cpu,
        memory_free=memory,
        **extra,
    )


def _claim(
    name: str = "c", count: int = 1, device_class: str = "gpu.nvidia.com", **exact: Any
) -> ClaimRequest:
    return ClaimRequest(
        "ns",
        name,
        [{"name": "gpu", "exactly": {"deviceClassName": device_class, "count": count, **exact}}],
    )


def _pod(*claims: ClaimRequest, cpu: int = 1000, memory: int = 2**30, **extra: Any) -> PodRequest:
    return PodRequest("ns", "p", "pod-uid", cpu=cpu, memory=memory, claims=list(claims), **extra)


def _allocator(
    slices: list[dict], nodes: list[NodeState], allocated: set | None = None
) -> Allocator:
    return Allocator(Inventory(slices), CLASSES, nodes, allocated or set())


def _devices(outcome: Any) -> list[tuple[str, str, str]]:
    assert isinstance(outcome, Placement), outcome
    return outcome.devices


def test_exact_count_allocates_requested_devices_on_one_node() -> None:
    allocator = _allocator([_slice("a", 4)], [_node("a")])
    outcome = allocator.place(_pod(_claim(count=3)))
    assert isinstance(outcome, Placement)
    assert outcome.node == "a"
    assert outcome.allocations["c"] == {
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "a", "device": f"gpu-{i}"}
                for i in range(3)
            ],
        },
        "nodeSelector": allocation_node_selector("a"),
    }


def test_devices_are_never_allocated_twice_when_pods_are_committed() -> None:
    allocator = _allocator([_slice("a", 4)], [_node("a")], {("gpu.nvidia.com", "a", "gpu-0")})
    first = _pod(_claim(count=2))
    placement = allocator.place(first)
    assert _devices(placement) == [
        ("gpu.nvidia.com", "a", "gpu-1"),
        ("gpu.nvidia.com", "a", "gpu-2"),
    ]
    allocator.commit(placement, first)
    assert _devices(allocator.place(_pod(_claim(count=1)))) == [("gpu.nvidia.com", "a", "gpu-3")]
    assert isinstance(allocator.place(_pod(_claim(count=2))), Unschedulable)


def test_all_mode_allocates_every_matching_device_on_the_node() -> None:
    allocator = _allocator([_slice("a", 3)], [_node("a")])
    assert len(_devices(allocator.place(_pod(_claim(allocationMode="All"))))) == 3


def test_all_mode_fails_when_one_matching_device_is_in_use() -> None:
    allocator = _allocator([_slice("a", 3)], [_node("a")], {("gpu.nvidia.com", "a", "gpu-1")})
    outcome = allocator.place(_pod(_claim(allocationMode="All")))
    assert isinstance(outcome, Unschedulable)
    assert "1 cannot allocate all claims" in outcome.message


def test_all_mode_fails_when_no_device_matches_on_any_node() -> None:
    allocator = _allocator([_slice("a", 2, memory="10Gi")], [_node("a")])
    assert isinstance(
        allocator.place(_pod(_claim(device_class="big", allocationMode="All"))), Unschedulable
    )


def test_exact_count_uses_visible_devices_when_pool_is_incomplete() -> None:
    allocator = _allocator([_slice("a", 2, slice_count=2)], [_node("a")])
    assert len(_devices(allocator.place(_pod(_claim(count=2))))) == 2


def test_all_mode_reports_scheduler_error_when_pool_is_incomplete() -> None:
    allocator = _allocator([_slice("a", 2, slice_count=2)], [_node("a")])
    outcome = allocator.place(_pod(_claim(allocationMode="All")))
    assert isinstance(outcome, SchedulingError)
    assert outcome.message == (
        'running "DynamicResources" filter plugin: claim ns/c, request gpu: asks for all devices, '
        "but resource pool gpu.nvidia.com/a is currently being updated"
    )


def test_older_generation_is_ignored_when_a_newer_one_exists() -> None:
    slices = [
        _slice("a", ["old-0", "old-1", "old-2"], generation=1),
        _slice("a", ["new-0"], generation=2),
    ]
    allocator = _allocator(slices, [_node("a")])
    assert _devices(allocator.place(_pod(_claim()))) == [("gpu.nvidia.com", "a", "new-0")]
    assert isinstance(allocator.place(_pod(_claim(count=2))), Unschedulable)


def test_pool_with_duplicate_device_names_is_not_used() -> None:
    slices = [
        _slice("a", ["gpu-0"], slice_count=2, name="s1"),
        _slice("a", ["gpu-0"], slice_count=2, name="s2"),
    ]
    outcome = _allocator(slices, [_node("a")]).place(_pod(_claim()))
    assert isinstance(outcome, Unschedulable)


def test_claims_of_one_pod_land_on_one_node_when_no_node_holds_all() -> None:
    allocator = _allocator([_slice("a", 2), _slice("b", 2)], [_node("a"), _node("b")])
    outcome = allocator.place(_pod(_claim("c1", count=2), _claim("c2", count=1)))
    assert isinstance(outcome, Unschedulable)
    assert outcome.message == (
        "0/2 nodes are available: 2 cannot allocate all claims. still not schedulable, "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


def test_two_claims_share_a_node_when_it_has_room() -> None:
    allocator = _allocator([_slice("a", 2), _slice("b", 4)], [_node("a"), _node("b")])
    outcome = allocator.place(_pod(_claim("c1", count=2), _claim("c2", count=2)))
    assert isinstance(outcome, Placement)
    assert outcome.node == "b"
    assert {r["device"] for a in outcome.allocations.values() for r in a["devices"]["results"]} == {
        "gpu-0",
        "gpu-1",
        "gpu-2",
        "gpu-3",
    }


def test_node_without_enough_cpu_is_skipped_when_devices_are_free() -> None:
    allocator = _allocator([_slice("a", 8), _slice("b", 8)], [_node("a", cpu=2000), _node("b")])
    assert isinstance(placement := allocator.place(_pod(_claim(), cpu=4000)), Placement)
    assert placement.node == "b"


def test_unschedulable_message_counts_cpu_and_memory_reasons_when_nothing_fits() -> None:
    nodes = [_node("a", cpu=500), _node("b", memory=2**20), _node("c")]
    allocator = _allocator([_slice("a", 1), _slice("b", 1)], nodes)
    outcome = allocator.place(_pod(_claim()))
    assert isinstance(outcome, Unschedulable)
    assert outcome.message == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
        "1 cannot allocate all claims. still not schedulable, preemption: 0/3 nodes are "
        "available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found "
        "for incoming pod."
    )


def test_missing_device_class_is_reported_with_scheduler_wording() -> None:
    outcome = _allocator([_slice("a", 1)], [_node("a")]).place(_pod(_claim(device_class="nope")))
    assert isinstance(outcome, Unschedulable)
    assert outcome.message == (
        "0/1 nodes are available: request gpu: device class nope does not exist. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


def test_class_and_request_selectors_both_apply_when_allocating() -> None:
    slices = [_slice("a", 2, memory="10Gi"), _slice("b", 2, memory="80Gi", product="NVIDIA L40S")]
    allocator = _allocator(slices, [_node("a"), _node("b")])
    by_product = _claim(
        selectors=[
            {
                "cel": {
                    "expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L40S'"
                }
            }
        ]
    )
    assert isinstance(placement := allocator.place(_pod(by_product)), Placement)
    assert placement.node == "b"
    contradiction = _claim(
        device_class="big",
        selectors=[{"cel": {"expression": f"{MEMORY}.isLessThan(quantity('20Gi'))"}}],
    )
    assert isinstance(allocator.place(_pod(contradiction)), Unschedulable)


def test_selector_error_on_missing_attribute_is_a_scheduling_error_when_a_device_is_reached() -> (
    None
):
    claim = _claim(
        selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].model == 'x'"}}]
    )
    outcome = _allocator([_slice("a", 2)], [_node("a")]).place(_pod(claim))
    assert isinstance(outcome, SchedulingError)
    assert outcome.message == (
        'running "DynamicResources" filter plugin: claim ns/c: selector #0: '
        "CEL runtime error: no such key: model"
    )


def test_selector_error_is_not_reached_when_earlier_devices_satisfy_the_request() -> None:
    # gpu-0 matches; gpu-1 has no `model` and is never evaluated, as in the real allocator's
    # first-solution search.
    resource_slice = _slice("a", 2)
    resource_slice["spec"]["devices"][0]["attributes"]["model"] = {"string": "x"}
    claim = _claim(
        selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].model == 'x'"}}]
    )
    outcome = _allocator([resource_slice], [_node("a")]).place(_pod(claim))
    assert _devices(outcome) == [("gpu.nvidia.com", "a", "gpu-0")]


def test_selector_error_on_any_device_fails_all_mode_when_it_selects_its_devices() -> None:
    resource_slice = _slice("a", 2)
    resource_slice["spec"]["devices"][0]["attributes"]["model"] = {"string": "x"}
    claim = _claim(
        allocationMode="All",
        selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].model == 'x'"}}],
    )
    outcome = _allocator([resource_slice], [_node("a")]).place(_pod(claim))
    assert isinstance(outcome, SchedulingError)
    assert "claim ns/c: selector #0: CEL runtime error: no such key: model" in outcome.message


def test_pre_allocated_claim_pins_pod_to_its_node() -> None:
    allocation = {
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "b", "device": "gpu-0"}
            ]
        },
        "nodeSelector": allocation_node_selector("b"),
    }
    claim = _claim(count=1)
    claim.allocation = allocation
    allocator = _allocator(
        [_slice("a", 2), _slice("b", 2)],
        [_node("a"), _node("b")],
        {("gpu.nvidia.com", "b", "gpu-0")},
    )
    outcome = allocator.place(_pod(claim))
    assert isinstance(outcome, Placement)
    assert outcome.node == "b"
    assert outcome.allocations == {}
    assert outcome.devices == []


def test_pinned_claim_is_deallocated_when_its_node_cannot_take_the_pod() -> None:
    claim = _claim(count=1)
    claim.allocation = {"devices": {"results": []}, "nodeSelector": allocation_node_selector("b")}
    allocator = _allocator([_slice("a", 2), _slice("b", 2)], [_node("a"), _node("b", cpu=0)])
    outcome = allocator.place(_pod(claim))
    assert isinstance(outcome, Unschedulable)
    assert outcome.deallocate == ["c"]
    assert outcome.message.startswith(
        "0/2 nodes are available: 1 Insufficient cpu, 1 resourceclaim not available on the node. "
        "deallocation of ResourceClaim completed"
    )


def test_claim_being_deleted_blocks_scheduling() -> None:
    claim = _claim()
    claim.deleting = True
    outcome = _allocator([_slice("a", 1)], [_node("a")]).place(_pod(claim))
    assert isinstance(outcome, Unschedulable)
    assert 'resourceclaim "c" is being deleted' in outcome.message


def test_first_available_falls_back_to_next_subrequest_when_first_cannot_fit() -> None:
    claim = ClaimRequest(
        "ns",
        "c",
        [
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "big", "count": 1},
                    {"name": "any", "deviceClassName": "gpu.nvidia.com", "count": 1},
                ],
            }
        ],
    )
    outcome = _allocator([_slice("a", 1, memory="10Gi")], [_node("a")]).place(_pod(claim))
    assert isinstance(outcome, Placement)
    assert outcome.allocations["c"]["devices"]["results"][0]["request"] == "gpu/any"


def test_admin_access_may_use_a_device_that_is_in_use() -> None:
    allocator = _allocator([_slice("a", 1)], [_node("a")], {("gpu.nvidia.com", "a", "gpu-0")})
    outcome = allocator.place(_pod(_claim(adminAccess=True)))
    assert isinstance(outcome, Placement)
    assert outcome.devices == []
    assert outcome.allocations["c"]["devices"]["results"][0]["adminAccess"] is True


def test_cordoned_and_selector_mismatched_nodes_are_reported() -> None:
    nodes = [_node("a", unschedulable=True), _node("b")]
    outcome = _allocator([_slice("a", 1), _slice("b", 1)], nodes).place(
        _pod(_claim(), node_selector={"kubernetes.io/hostname": "a"})
    )
    assert isinstance(outcome, Unschedulable)
    assert outcome.message.startswith(
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) were unschedulable."
    )


def test_pod_without_claims_is_placed_by_cpu_and_memory_only() -> None:
    allocator = _allocator([], [_node("a", cpu=1000), _node("b", cpu=8000)])
    outcome = allocator.place(_pod(cpu=4000))
    assert isinstance(outcome, Placement)
    assert outcome.node == "b"


def test_allocated_devices_collects_results_but_not_admin_access() -> None:
    claims = [
        {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"driver": "d", "pool": "p", "device": "x"},
                            {"driver": "d", "pool": "p", "device": "y", "adminAccess": True},
                        ]
                    }
                }
            }
        },
        {"status": {}},
    ]
    assert allocated_devices(claims) == {("d", "p", "x")}


@pytest.mark.parametrize("mode", ["ExactCount", "All"])
def test_devices_of_other_nodes_are_never_mixed_in(mode: str) -> None:
    allocator = _allocator([_slice("a", 1), _slice("b", 1)], [_node("a"), _node("b")])
    outcome = allocator.place(_pod(_claim(count=1, allocationMode=mode)))
    assert isinstance(outcome, Placement)
    assert {pool for _, pool, _ in outcome.devices} == {outcome.node}
