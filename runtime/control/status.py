"""Pure derivation of a unit's phase, reason and DRA status from its observed claim and pod."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.models import UnitPhase

_IMAGE_PULL = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
_CRASH = {"CrashLoopBackOff", "RunContainerError", "CreateContainerError"}


@dataclass(frozen=True)
class Observed:
    phase: str
    reason: str
    message: str
    dra: dict
    node_name: str = ""
    devices: list[dict] = field(default_factory=list)


def dra_status(claim_name: str, claim: dict | None) -> dict:
    """`{claimName, allocated, devices[]}` from ResourceClaim.status.allocation, sorted."""
    allocation = ((claim or {}).get("status") or {}).get("allocation")
    results = ((allocation or {}).get("devices") or {}).get("results") or []
    devices = sorted(
        (
            {
                "request": r.get("request", ""),
                "driver": r.get("driver", ""),
                "pool": r.get("pool", ""),
                "device": r.get("device", ""),
                # A share of a device (consumable capacity): which share, and how much of it.
                **({"shareID": r["shareID"]} if r.get("shareID") else {}),
                **(
                    {"consumedCapacity": r["consumedCapacity"]} if r.get("consumedCapacity") else {}
                ),
            }
            for r in results
        ),
        key=lambda d: (d["request"], d["driver"], d["pool"], d["device"]),
    )
    status = {"claimName": claim_name, "allocated": allocation is not None, "devices": devices}
    # A firstAvailable request's results name it "<request>/<subrequest>": the alternative.
    chosen = {d["request"].partition("/")[2] for d in devices if "/" in d["request"]}
    if len(chosen) == 1:
        status["alternative"] = chosen.pop()
    return status


def scheduling_reason(message: str) -> str:
    """Name the scheduler's complaint the way the API documents it."""
    lowered = message.lower()
    if "device class" in lowered and "does not exist" in lowered:
        return "DeviceClassNotFound"
    if "exceeded quota" in lowered:
        return "QuotaExceeded"
    if "cannot allocate all claims" in lowered:
        return "NoMatchingDevices"
    if "unbound immediate persistentvolumeclaims" in lowered or (
        "persistentvolumeclaim" in lowered and "not found" in lowered
    ):
        return "StorageNotBound"
    if "insufficient cpu" in lowered or "insufficient memory" in lowered:
        return "InsufficientResources"
    return "Unschedulable"


def _condition(pod: dict, kind: str) -> dict | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def observe(*, claim_name: str, claim: dict | None, pod: dict | None) -> Observed:
    """What the cluster says about a provisioned unit whose pod exists."""
    dra = dra_status(claim_name, claim)
    if pod is None:
        return Observed(UnitPhase.PROVISIONING, "PodMissing", "The unit's pod is missing.", dra)
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName") or ""
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason") or ""
        if reason in _IMAGE_PULL:
            message = waiting.get("message") or f"Cannot pull image {container.get('image')}."
            return Observed(UnitPhase.FAILED, "ImagePullFailed", message, dra, node)
        if reason in _CRASH:
            message = waiting.get("message") or "The container keeps crashing."
            return Observed(UnitPhase.FAILED, "ContainerCrashLoop", message, dra, node)
    pod_phase = status.get("phase") or "Pending"
    if pod_phase == "Failed":
        reason = status.get("reason") or "PodFailed"
        return Observed(
            UnitPhase.FAILED, reason, status.get("message") or "The pod failed.", dra, node
        )
    if pod_phase == "Succeeded":
        return Observed(UnitPhase.FAILED, "Completed", "The workload exited.", dra, node)
    if pod_phase == "Running" and dra["allocated"]:
        ready = _condition(pod, "Ready")
        if ready is None or ready.get("status") == "True":
            return Observed(UnitPhase.RUNNING, "Running", "The unit is running.", dra, node)
        return Observed(
            UnitPhase.PENDING, "ContainersNotReady", "Waiting for the containers.", dra, node
        )
    scheduled = _condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        message = scheduled.get("message") or ""
        return Observed(UnitPhase.PENDING, scheduling_reason(message), message, dra, node)
    if not dra["allocated"]:
        return Observed(
            UnitPhase.PENDING, "WaitingForAllocation", "Waiting for devices to be allocated.", dra
        )
    return Observed(UnitPhase.PENDING, "Starting", "The pod is starting.", dra, node)
