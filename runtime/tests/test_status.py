"""Phase derivation from observed claims and pods (pure)."""

import pytest

from runtime.control.status import dra_status, observe, scheduling_reason

ALLOCATED = {
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-3"},
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"},
                ]
            }
        }
    }
}


def pod(phase="Pending", *, node="", conditions=(), waiting=None):
    status = {"phase": phase, "conditions": list(conditions)}
    if waiting:
        status["containerStatuses"] = [{"image": "x", "state": {"waiting": waiting}}]
    return {"spec": {"nodeName": node} if node else {}, "status": status}


def test_dra_status_lists_devices_sorted_and_allocated():
    assert dra_status("c", ALLOCATED) == {
        "claimName": "c",
        "allocated": True,
        "devices": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"},
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-3"},
        ],
    }
    assert dra_status("c", {"status": {}}) == {"claimName": "c", "allocated": False, "devices": []}


def test_running_when_pod_runs_and_claim_is_allocated():
    ready = {"type": "Ready", "status": "True"}
    observed = observe(
        claim_name="c", claim=ALLOCATED, pod=pod("Running", node="n1", conditions=[ready])
    )
    assert (observed.phase, observed.reason, observed.node_name) == ("Running", "Running", "n1")


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            "0/3 nodes are available: 3 cannot allocate all claims. still not schedulable",
            "NoMatchingDevices",
        ),
        (
            "0/3 nodes are available: request gpu: device class nvidia-x does not exist",
            "DeviceClassNotFound",
        ),
        ("0/3 nodes are available: 3 Insufficient cpu.", "InsufficientResources"),
        ("something else", "Unschedulable"),
    ],
)
def test_pending_reason_from_the_scheduler_message(message, reason):
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }
    observed = observe(claim_name="c", claim={"status": {}}, pod=pod(conditions=[condition]))
    assert (observed.phase, observed.reason, observed.message) == ("Pending", reason, message)
    assert scheduling_reason(message) == reason


@pytest.mark.parametrize(
    ("waiting_reason", "reason"),
    [
        ("ImagePullBackOff", "ImagePullFailed"),
        ("ErrImagePull", "ImagePullFailed"),
        ("CrashLoopBackOff", "ContainerCrashLoop"),
    ],
)
def test_failed_when_the_container_cannot_start(waiting_reason, reason):
    observed = observe(
        claim_name="c",
        claim=ALLOCATED,
        pod=pod("Pending", node="n1", waiting={"reason": waiting_reason, "message": "boom"}),
    )
    assert (observed.phase, observed.reason, observed.message) == ("Failed", reason, "boom")


def test_failed_pod_keeps_its_reason():
    failed = pod("Failed", node="n1")
    failed["status"].update(reason="NodeLost", message="node gone")
    observed = observe(claim_name="c", claim=ALLOCATED, pod=failed)
    assert (observed.phase, observed.reason) == ("Failed", "NodeLost")


def test_waiting_for_allocation_without_scheduler_verdict():
    observed = observe(claim_name="c", claim={"status": {}}, pod=pod())
    assert (observed.phase, observed.reason) == ("Pending", "WaitingForAllocation")
