"""Plain-language sentences for the machine reasons a unit reports when it waits or fails."""

from __future__ import annotations

from runtime.models import GPUUnit

# Each sentence may use {gpu}, {device_class}, {image}, {claim}, {namespace} and {name}.
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
}


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
    )
