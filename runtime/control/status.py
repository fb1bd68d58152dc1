"""Pure derivation of a unit's phase, reason and DRA status from its observed claim and pod."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

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


# ---------------------------------------------------------------------------- what is billed


def k8s_time(value: str | None) -> datetime | None:
    """An API timestamp (RFC 3339, "Z") as an aware datetime; None for none."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


TERMINAL = ("Succeeded", "Failed")


def _statuses(pod: dict) -> list[dict]:
    """Every container's status, the init containers' too: the SSH sidecar is a restartable
    init container on the same claim."""
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _container_states(pod: dict) -> list[dict]:
    return [entry.get("state") or {} for entry in _statuses(pod)]


def first_started(pod: dict) -> datetime | None:
    """When the pod's first container started, as far as its status still tells: the earliest
    `startedAt` of any container's current or last state (a container restarted twice before
    the first sight shows only its last two starts)."""
    moments = []
    for entry in _statuses(pod):
        for state in (entry.get("state") or {}, entry.get("lastState") or {}):
            for kind in ("running", "terminated"):
                if (moment := k8s_time((state.get(kind) or {}).get("startedAt"))) is not None:
                    moments.append(moment)
    return min(moments, default=None)


def holds_idle(pod: dict | None, claim: dict | None) -> bool:
    """Whether the pod holds its claim's allocated devices while no container of it has
    started yet (an image being pulled, or one that never pulls): not billed, and not for
    long (the start deadline, runtime/actions.py `stop_idle_units`)."""
    if pod is None or (pod.get("status") or {}).get("phase") in TERMINAL:
        return False
    return dra_status("", claim)["allocated"] and first_started(pod) is None


def held_since(pod: dict | None, claim: dict | None) -> datetime | None:
    """When the pod began holding its claim's devices, the start of what is billed (one rule,
    docs/billing.md): its first container's start, whatever its containers did since (an
    exit, a restart, a crash loop or an OOM kill inside the same pod change nothing). None
    while no container of it has started, or while it is not terminal and its claim is not
    allocated. A terminal pod is seen after the fact: it held its devices from that start
    until `released_at`, whatever its claim says now."""
    if pod is None:
        return None
    terminal = (pod.get("status") or {}).get("phase") in TERMINAL
    if not terminal and not dra_status("", claim)["allocated"]:
        return None
    return first_started(pod)


def released_at(pod: dict, *, gone: bool) -> datetime | None:
    """When the pod released its devices, as the cluster reports it; None while it holds them.
    A pod holds them until it is terminal (Succeeded or Failed: its containers' last
    `finishedAt`) or gone. A pod seen deleted released them when its last container ended, if
    none runs or waits to restart; else (a forced deletion, a container in back-off) at its
    `deletionTimestamp`, by when its kubelet was to have killed it. A container that exits in
    a pod that goes on (restartPolicy Always) releases nothing."""
    states = _container_states(pod)
    ends = [
        moment
        for state in states
        if (moment := k8s_time((state.get("terminated") or {}).get("finishedAt"))) is not None
    ]
    deleted = k8s_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    if (pod.get("status") or {}).get("phase") in TERMINAL:
        return max(ends) if ends else (deleted if gone else None)
    if not gone:
        return None
    if ends and all("terminated" in state for state in states):
        return max(ends)
    return deleted if deleted is not None else max(ends, default=None)


@dataclass(frozen=True)
class MeterStep:
    """What a unit's meter should do given its pod: `close` (at `close_at`; None: the last time
    the pod was seen running) how the end is known (`ended`: observed, replaced, last-seen),
    then `open_at` a meter for the current pod (`of_last`: for the pod seen deleted instead),
    closed again at once at `open_until` when that pod had released its devices before it was
    first seen; or `seen` (still holding) or `missing` (the backstop's first sight of a pod
    gone without trace)."""

    close: bool = False
    close_at: datetime | None = None
    ended: str = ""
    open_at: datetime | None = None
    open_until: datetime | None = None
    of_last: bool = False
    seen: bool = False
    missing: bool = False


OBSERVED, REPLACED, LAST_SEEN = "observed", "replaced", "last-seen"


def _uid(pod: dict | None) -> str | None:
    return ((pod or {}).get("metadata") or {}).get("uid")


def _opening(pod: dict | None, claim: dict | None, *, gone: bool = False) -> dict:
    """The meter to open for `pod`: from its first container's start, and when it released
    its devices already (seen first terminal, or deleted), until then."""
    starts = held_since(pod, claim) if not gone else (first_started(pod) if pod else None)
    if starts is None or pod is None:
        return {}
    return {"open_at": starts, "open_until": released_at(pod, gone=gone)}


def meter_step(
    metered_pod: str | None,
    *,
    metered_created: datetime | None = None,
    pod: dict | None,
    last_pod: dict | None,
    claim: dict | None,
    missing_before: bool,
    backstop: bool,
) -> MeterStep:
    """Decide a unit's meter from its pod as observed. `metered_pod`: the uid of the pod its
    open meter follows (None: no meter), created at `metered_created` (a pod older than
    that is a stale view). `last_pod`: its pod as a watch saw it deleted. `missing_before`:
    the backstop already found the metered pod gone once. The backstop (`backstop`) closes
    at the last time seen only on its second sight, so an end the observer is about to read
    from a DELETED event is not estimated first. Every view may be late, repeated or the
    first after others were missed; the ledger bills a pod once (MeteredPod)."""
    uid = _uid(pod)
    if metered_pod is None:
        if pod is None and last_pod is not None:
            # A pod that came and went between two sights: what it held is billed still.
            return MeterStep(**_opening(last_pod, claim, gone=True), of_last=True)
        return MeterStep(**_opening(pod, claim))
    if pod is not None and uid == metered_pod:
        end = released_at(pod, gone=False)
        if end is not None:
            return MeterStep(close=True, close_at=end, ended=OBSERVED)
        if first_started(pod) is None:
            # A late view from before it ran (no container of a pod ever un-starts): it says
            # nothing about the pod now, and must not undo the backstop finding it gone.
            return MeterStep()
        return MeterStep(seen=True)
    if last_pod is not None and _uid(last_pod) == metered_pod:
        end = released_at(last_pod, gone=True)
        if end is not None:
            return MeterStep(close=True, close_at=end, ended=OBSERVED, **_opening(pod, claim))
    if pod is not None:
        created = k8s_time((pod.get("metadata") or {}).get("creationTimestamp"))
        if created is not None and metered_created is not None and created < metered_created:
            return MeterStep()  # an older pod than the metered one: a stale view, nothing to do
        # A newer pod of the same name: the metered one was gone when it was created.
        return MeterStep(close=True, close_at=created, ended=REPLACED, **_opening(pod, claim))
    if backstop and not missing_before:
        return MeterStep(missing=True)
    return MeterStep(close=True, close_at=None, ended=LAST_SEEN)
