"""Plain-language sentences for the machine reasons a unit reports when it waits, fails,
stops or is being changed."""

from __future__ import annotations

from runtime.models import GPUUnit

# Each sentence may use {gpu}, {device_class}, {image}, {claim}, {namespace}, {name},
# {generation} and {stop_after}.
SENTENCES: dict[str, str] = {
    "NoMatchingDevices": (
        "No node has {gpu} free {device_class} GPUs for this unit right now. It stays pending "
        "and starts by itself as soon as enough devices are free."
    ),
    "DeviceClassNotFound": (
        "The cluster has no device class named {device_class}, so its GPUs cannot be "
        "allocated. An operator has to install the device class or fix the package."
    ),
    "QuotaExceeded": (
        "The resource quota of namespace {namespace} does not leave room for this unit. "
        "Delete a unit you no longer need or ask an operator to raise the quota."
    ),
    "InsufficientResources": (
        "No node with free GPUs has enough CPU or memory left for this unit. It starts when "
        "capacity frees up."
    ),
    "Unschedulable": "Kubernetes cannot place the unit's pod on any node yet.",
    "WaitingForAllocation": "The unit is waiting for the DRA driver to allocate its GPUs.",
    "Starting": "The GPUs are allocated and the unit's container is starting.",
    "ContainersNotReady": "The container runs but does not report ready yet.",
    "NodeNotReady": (
        "The node the unit runs on stopped reporting ready, so the unit is not served. If the "
        "node does not come back within a few minutes, Kubernetes evicts the pod; restart the "
        "unit to run it elsewhere."
    ),
    "ImagePullFailed": (
        "The image {image} could not be pulled. Check its name and tag, and that the "
        "registry lets the cluster pull it."
    ),
    "ContainerCrashLoop": (
        "The container keeps exiting right after it starts. Check the image's command and its logs."
    ),
    "NameInUse": (
        "An object named {name} already exists in namespace {namespace} and was not created "
        "by the control plane, so it was left alone. Delete this unit and order it under "
        "another name."
    ),
    "ProvisioningFailed": (
        "The control plane could not create the unit's Kubernetes objects and gave up after "
        "repeated attempts."
    ),
    "InvalidSpec": "The cluster rejected the unit's Kubernetes objects as invalid.",
    "Forbidden": "The cluster refused to create the unit's objects (permission denied).",
    "Completed": "The workload exited on its own, so the unit no longer runs.",
    "PodFailed": "The unit's pod failed.",
    "PodMissing": "The unit's pod disappeared; the control plane is recreating it.",
    # Stop, start, restart, update and auto-stop (ARCHITECTURE §12).
    "StartRequested": (
        "The unit is starting again: its pod is created and its GPUs allocated afresh, which "
        "may be other GPUs than before."
    ),
    "StopRequested": (
        "The unit is stopping: its pod is removed and its {gpu} GPUs go back to the pool. Its "
        "name, storage, SSH and access settings stay; start it again when you need it."
    ),
    "AutoStop": (
        "Auto-stop: the unit has run for its stopAfter of {stop_after}, so the control plane "
        "stops it. Its GPUs go back to the pool and stop costing; start it again when you "
        "need it."
    ),
    "StartDeadlineExceeded": (
        "The unit's pod held its {gpu} GPUs without ever starting its container (its image "
        "did not pull, or the container could not be created), so the control plane stopped "
        "it: the GPUs went back to the pool and nothing was billed. The timeline says what "
        "the cluster reported; fix that and start the unit again."
    ),
    "Stopped": (
        "The unit is stopped: it has no pod and holds no GPUs, and its CPU and memory no "
        "longer count against your quota. Its name, storage, SSH and access settings are "
        "kept; Start runs it again on GPUs allocated afresh."
    ),
    "WaitingForPreemption": (
        "No free GPUs fit the unit, so interruptible units are giving way for it: once their "
        "notice has run out and their containers have stopped, the unit gets their GPUs."
    ),
    "Preempting": (
        "The unit is interruptible and an on-demand unit needs its GPUs: the control plane "
        "stops it at the time shown (its containers get SIGTERM and their grace period then). "
        "Save your work before then."
    ),
    "Preempted": (
        "The unit is interruptible and its GPUs were taken back for an on-demand unit. Its "
        "name, storage, SSH and access settings are kept; Start runs it again when there is "
        "room, and it is billed again only from then."
    ),
    "Restarting": (
        "The unit is restarting: its pod is replaced by a new one, whose GPUs are allocated afresh."
    ),
    "Updating": (
        "The unit's settings changed: its pod is replaced by one built from generation "
        "{generation}. The claim and its GPUs are kept."
    ),
    "UpdateRequested": (
        "A change to the unit's settings was recorded as generation {generation}; it needs no "
        "new pod."
    ),
    "Started": "The unit was started again and runs on GPUs allocated afresh.",
    "Restarted": "The unit's pod was replaced by a new one.",
    "Updated": "The unit's change is rolled out: its pod runs generation {generation}.",
    "DeviceUnhealthy": (
        "A GPU this unit held is unhealthy (tainted NoExecute, named below), so the cluster "
        "removed the unit's pod and it no longer costs anything. Restart the unit to get "
        "healthy GPUs."
    ),
    "StopFailed": (
        "The control plane could not stop the unit and gave up after repeated attempts. Stop "
        "it again, or delete it."
    ),
    "StartFailed": (
        "The control plane could not start the unit and gave up after repeated attempts. "
        "Restart it to try again, or stop it."
    ),
    "RestartFailed": (
        "The control plane could not restart the unit and gave up after repeated attempts. "
        "Restart it to try again."
    ),
    "UpdateFailed": (
        "The control plane could not roll out the unit's change and gave up after repeated "
        "attempts. Restart it to try again, or edit it."
    ),
}
# Phases whose reason is always worth a sentence, even one the dashboard has no words for.
EXPLAINED_PHASES = frozenset({"Pending", "Failed", "Stopping", "Stopped", "Preempted"})


def explain(unit: GPUUnit) -> str:
    """One sentence on why `unit` is where it is; empty when its reason needs no words."""
    template = SENTENCES.get(unit.reason)
    if template is None:
        return f"Kubernetes reports {unit.reason}." if unit.reason else ""
    return template.format(
        gpu=unit.gpu,
        device_class=unit.device_class_name,
        image=unit.image,
        claim=unit.claim_name,
        namespace=unit.namespace,
        name=unit.name,
        generation=unit.generation,
        stop_after=unit.stop_after or "its limit",
    )


def status_explanation(unit: GPUUnit) -> str:
    """What the unit page says under the phase: every reason of a unit that waits, failed or
    stops; in the other phases only the reasons it has words for (a Running unit's reason
    Running needs none)."""
    if unit.phase in EXPLAINED_PHASES:
        return explain(unit)
    return explain(unit) if unit.reason in SENTENCES else ""
