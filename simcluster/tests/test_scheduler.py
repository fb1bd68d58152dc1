"""The scheduler loop against an in-process store: binding, claim status, failure reporting
without event spam, release and deallocation, pod GC and restarts."""

from __future__ import annotations

import time
from typing import Any

import pytest

from simcluster.scheduler import DELETE_PROTECTION, Scheduler
from simcluster.store import Store
from simcluster.topology import build_objects

TOPOLOGY = {
    "nodes": [
        {
            "name": "node-a",
            "cpu": "16",
            "memory": "64Gi",
            "gpus": [{"product": "A100", "count": 2, "memory": "40Gi"}],
        },
        {
            "name": "node-b",
            "cpu": "16",
            "memory": "64Gi",
            "gpus": [{"product": "A100", "count": 2, "memory": "40Gi"}],
        },
    ],
    "deviceClasses": [{"name": "gpu", "selector": "device.driver == 'gpu.nvidia.com'"}],
}


@pytest.fixture
def store() -> Store:
    store = Store()
    store.create(
        "namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}},
        internal=True,
    )
    for resource, obj in build_objects(TOPOLOGY):
        store.create(resource, obj, internal=True)
    return store


@pytest.fixture
def scheduler(store: Store) -> Scheduler:
    return Scheduler(store)


def _claim(store: Store, name: str, count: int = 1, **exact: Any) -> dict:
    """A claim for `count` devices of class gpu; count=0 leaves the count out (for All)."""
    exact = {"deviceClassName": "gpu", **({"count": count} if count else {}), **exact}
    return store.create(
        "resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": exact,
                        }
                    ]
                }
            },
        },
    )


def _pod(store: Store, name: str, *claims: str, cpu: str = "1") -> dict:
    return store.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {
                "resourceClaims": [
                    {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)
                ],
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox:1.36",
                        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
                    }
                ],
            },
        },
    )


def _get(store: Store, resource: str, name: str) -> dict:
    return store.get(resource, "team", name)


def _events(store: Store, reason: str) -> list[dict]:
    return [e for e in store.list("events", "team") if e["reason"] == reason]


def test_pod_is_bound_running_and_claim_allocated_when_devices_are_free(
    store: Store, scheduler: Scheduler
) -> None:
    _claim(store, "claim", count=2)
    pod = _pod(store, "worker", "claim")
    assert scheduler.run_once().bound == 1

    claim = _get(store, "resourceclaims", "claim")
    allocation = claim["status"]["allocation"]
    node = allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
    assert [(r["driver"], r["pool"]) for r in allocation["devices"]["results"]] == [
        ("gpu.nvidia.com", node)
    ] * 2
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "worker", "uid": pod["metadata"]["uid"]}
    ]
    assert DELETE_PROTECTION in claim["metadata"]["finalizers"]

    bound = _get(store, "pods", "worker")
    assert bound["spec"]["nodeName"] == node
    assert bound["status"]["phase"] == "Running"
    assert {c["type"]: c["status"] for c in bound["status"]["conditions"]} == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    assert bound["status"]["hostIP"].startswith("10.")
    assert bound["status"]["podIP"].startswith("10.244.")
    assert bound["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    assert (
        _events(store, "Scheduled")[0]["message"] == f"Successfully assigned team/worker to {node}"
    )


def test_pod_stays_pending_with_condition_and_one_event_when_claims_cannot_fit(
    store: Store, scheduler: Scheduler
) -> None:
    _claim(store, "huge", count=3)
    _pod(store, "worker", "huge")
    assert scheduler.run_once().unschedulable == 1
    pod = _get(store, "pods", "worker")
    condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["status"] == "False"
    assert condition["reason"] == "Unschedulable"
    assert condition["message"] == (
        "0/2 nodes are available: 2 cannot allocate all claims. still not schedulable, "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    scheduler.run_once()
    scheduler.run_once()
    [event] = _events(store, "FailedScheduling")
    assert event["type"] == "Warning"
    assert event["count"] == 1
    assert event["involvedObject"]["name"] == "worker"
    assert event["message"] == condition["message"]


def test_event_count_grows_instead_of_new_events_when_retried_after_a_change(
    store: Store, scheduler: Scheduler
) -> None:
    _claim(store, "huge", count=3)
    _pod(store, "worker", "huge")
    scheduler.run_once()
    _claim(store, "unrelated")
    scheduler.run_once()
    [event] = _events(store, "FailedScheduling")
    assert event["count"] == 2


def test_unschedulable_pod_is_retried_when_retry_interval_passed(store: Store) -> None:
    scheduler = Scheduler(store, retry_interval=0.0)
    _claim(store, "huge", count=3)
    _pod(store, "worker", "huge")
    scheduler.run_once()
    assert scheduler.run_once().unschedulable == 1
    [event] = _events(store, "FailedScheduling")
    assert event["count"] == 2


def test_pod_waits_without_event_when_its_claim_does_not_exist_yet(
    store: Store, scheduler: Scheduler
) -> None:
    _pod(store, "worker", "later")
    assert scheduler.run_once().waiting_for_claims == 1
    condition = _get(store, "pods", "worker")["status"]["conditions"][0]
    assert condition["message"] == 'resourceclaim.resource.k8s.io "later" not found'
    assert _events(store, "FailedScheduling") == []
    _claim(store, "later")
    assert scheduler.run_once().bound == 1


def test_deleting_the_pod_releases_and_deallocates_its_claim(
    store: Store, scheduler: Scheduler
) -> None:
    _claim(store, "claim")
    _pod(store, "worker", "claim")
    scheduler.run_once()
    store.delete("pods", "team", "worker")
    report = scheduler.run_once()
    assert (report.released, report.deallocated) == (1, 1)
    claim = _get(store, "resourceclaims", "claim")
    assert "allocation" not in claim["status"]
    assert "reservedFor" not in claim["status"]
    assert "finalizers" not in claim["metadata"]


def test_claim_deleted_while_in_use_lingers_until_its_pod_is_gone(
    store: Store, scheduler: Scheduler
) -> None:
    _claim(store, "claim")
    _pod(store, "worker", "claim")
    scheduler.run_once()
    store.delete("resourceclaims", "team", "claim")
    lingering = _get(store, "resourceclaims", "claim")
    assert lingering["metadata"]["deletionTimestamp"]
    assert lingering["status"]["allocation"]
    store.delete("pods", "team", "worker")
    scheduler.run_once()
    assert _get(store, "resourceclaims", "claim") is None


def test_freed_devices_go_to_a_waiting_pod_on_the_next_pass(
    store: Store, scheduler: Scheduler
) -> None:
    for index in range(2):
        _claim(store, f"full-{index}", count=2)
        _pod(store, f"holder-{index}", f"full-{index}")
    _claim(store, "waiting", count=2)
    _pod(store, "waiter", "waiting")
    report = scheduler.run_once()
    assert (report.bound, report.unschedulable) == (2, 1)
    store.delete("pods", "team", "holder-0")
    assert scheduler.run_once().bound == 1
    assert _get(store, "pods", "waiter")["status"]["phase"] == "Running"


def test_shared_claim_keeps_its_allocation_until_the_last_pod_leaves(
    store: Store, scheduler: Scheduler
) -> None:
    _claim(store, "shared")
    _pod(store, "one", "shared")
    scheduler.run_once()
    _pod(store, "two", "shared")
    scheduler.run_once()
    claim = _get(store, "resourceclaims", "shared")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["one", "two"]
    assert (
        _get(store, "pods", "one")["spec"]["nodeName"]
        == _get(store, "pods", "two")["spec"]["nodeName"]
    )
    store.delete("pods", "team", "one")
    scheduler.run_once()
    claim = _get(store, "resourceclaims", "shared")
    assert claim["status"]["allocation"]
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["two"]


def test_deleting_a_node_fails_its_pods_and_releases_their_claims(
    store: Store, scheduler: Scheduler
) -> None:
    _claim(store, "claim")
    _pod(store, "worker", "claim")
    scheduler.run_once()
    node = _get(store, "pods", "worker")["spec"]["nodeName"]
    store.delete("nodes", None, node)
    report = scheduler.run_once()
    assert (report.failed_pods, report.deallocated) == (1, 1)
    pod = _get(store, "pods", "worker")
    assert pod["status"]["phase"] == "Failed"
    disruption = next(c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (disruption["reason"], disruption["message"]) == (
        "DeletionByPodGC",
        "PodGC: node no longer exists",
    )
    assert "allocation" not in _get(store, "resourceclaims", "claim")["status"]


def test_all_mode_on_incomplete_pool_is_reported_as_scheduler_error(
    store: Store, scheduler: Scheduler
) -> None:
    resource_slice = store.list("resourceslices")[0]
    resource_slice["spec"]["pool"]["resourceSliceCount"] = 2
    store.update("resourceslices", resource_slice, internal=True)
    _claim(store, "everything", count=0, allocationMode="All")
    _pod(store, "worker", "everything")
    assert scheduler.run_once().errors == 1
    condition = _get(store, "pods", "worker")["status"]["conditions"][0]
    assert condition["reason"] == "SchedulerError"
    assert "asks for all devices, but resource pool gpu.nvidia.com/" in condition["message"]
    assert "is currently being updated" in condition["message"]


def test_new_scheduler_on_the_same_store_keeps_existing_allocations(
    store: Store, scheduler: Scheduler
) -> None:
    _claim(store, "first", count=2)
    _pod(store, "one", "first")
    scheduler.run_once()
    _claim(store, "second", count=2)
    _pod(store, "two", "second")
    Scheduler(store).run_once()
    devices = [
        (r["pool"], r["device"])
        for name in ("first", "second")
        for r in _get(store, "resourceclaims", name)["status"]["allocation"]["devices"]["results"]
    ]
    assert len(devices) == len(set(devices)) == 4


def test_background_loop_binds_a_pod_soon_after_it_is_created(store: Store) -> None:
    scheduler = Scheduler(store, tick=0.05)
    scheduler.start()
    try:
        _claim(store, "claim")
        _pod(store, "worker", "claim")
        deadline = time.monotonic() + 10
        while _get(store, "pods", "worker")["status"].get("phase") != "Running":
            assert time.monotonic() < deadline, "pod was not scheduled in time"
            time.sleep(0.02)
    finally:
        scheduler.stop()


# Only VFIO devices publish `numa` (dra-facts §6): reading it on a GPU fails at run time.
MISSING_NUMA = 'device.attributes["gpu.nvidia.com"].numa > 0'


def test_cel_runtime_error_is_a_scheduler_error_naming_claim_and_selector_when_key_is_missing(
    store: Store, scheduler: Scheduler
) -> None:
    guarded = "device.attributes['gpu.nvidia.com'].productName != ''"
    _claim(store, "bad", selectors=[{"cel": {"expression": e}} for e in (guarded, MISSING_NUMA)])
    _pod(store, "worker", "bad")
    assert scheduler.run_once().errors == 1
    condition = _get(store, "pods", "worker")["status"]["conditions"][0]
    assert (condition["status"], condition["reason"]) == ("False", "SchedulerError")
    assert condition["message"] == (
        'running "DynamicResources" filter plugin: claim team/bad: selector #1: '
        "CEL runtime error: no such key: numa"
    )
    assert _events(store, "FailedScheduling")[0]["message"] == condition["message"]
    assert "allocation" not in (_get(store, "resourceclaims", "bad").get("status") or {})


def test_cel_runtime_error_in_a_class_selector_names_the_class_when_it_fails(
    store: Store, scheduler: Scheduler
) -> None:
    store.create(
        "deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "indexed"},
            "spec": {"selectors": [{"cel": {"expression": MISSING_NUMA}}]},
        },
        internal=True,
    )
    _claim(store, "bad", deviceClassName="indexed")
    _pod(store, "worker", "bad")
    assert scheduler.run_once().errors == 1
    assert _get(store, "pods", "worker")["status"]["conditions"][0]["message"] == (
        'running "DynamicResources" filter plugin: class indexed: selector #0: '
        "CEL runtime error: no such key: numa"
    )


def test_cel_selector_is_not_evaluated_on_devices_in_use_when_all_are_taken(
    store: Store, scheduler: Scheduler
) -> None:
    # The allocator checks "in use" before the selectors: with every device held, the broken
    # selector never runs and the pod is merely unschedulable.
    _claim(store, "pair-a", count=2)
    _claim(store, "pair-b", count=2)
    _pod(store, "holder-a", "pair-a")
    _pod(store, "holder-b", "pair-b")
    assert scheduler.run_once().bound == 2
    _claim(store, "bad", selectors=[{"cel": {"expression": MISSING_NUMA}}])
    _pod(store, "worker", "bad")
    report = scheduler.run_once()
    assert (report.errors, report.unschedulable) == (0, 1)
    assert (
        "cannot allocate all claims"
        in _get(store, "pods", "worker")["status"]["conditions"][0]["message"]
    )
