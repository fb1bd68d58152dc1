"""Server-side defaulting and status initialisation on create, as the real registries do it."""

from __future__ import annotations

from typing import Any

from simcluster.resources import ResourceType

QUANTITY_KEYS = ("cpu", "memory")


def _default_container(container: dict[str, Any]) -> None:
    image = container.get("image") or ""
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})


def qos_class(spec: dict[str, Any]) -> str:
    """BestEffort without requests/limits, Guaranteed when limits equal requests everywhere."""
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if any(key in requests or key in limits for key in QUANTITY_KEYS):
            any_set = True
        for key in QUANTITY_KEYS:
            if key not in limits or requests.get(key, limits[key]) != limits[key]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _default_pod(pod: dict[str, Any], internal: bool) -> None:
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or []:
            _default_container(container)
    if not internal or not pod.get("status"):
        pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def _default_exact(request: dict[str, Any]) -> None:
    request.setdefault("allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount":
        request.setdefault("count", 1)


def _default_resource_claim(claim: dict[str, Any], internal: bool) -> None:
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if isinstance(request.get("exactly"), dict):
            _default_exact(request["exactly"])
        for subrequest in request.get("firstAvailable") or []:
            _default_exact(subrequest)
    if not internal:
        claim.pop("status", None)


def _default_namespace(namespace: dict[str, Any], internal: bool) -> None:
    name = namespace["metadata"].get("name")
    if name:
        namespace["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    namespace.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    namespace["status"] = {"phase": "Active"}


def _default_resource_quota(quota: dict[str, Any], internal: bool) -> None:
    if not internal:
        quota.pop("status", None)


def crd_status(crd: dict[str, Any]) -> dict[str, Any]:
    """What the apiextensions controllers write once names are accepted and the CRD is served."""
    spec = crd["spec"]
    names = dict(spec["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    now = crd["metadata"]["creationTimestamp"]
    storage = [v["name"] for v in spec.get("versions", []) if v.get("storage")]
    return {
        "acceptedNames": names,
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
        "storedVersions": storage,
    }


def _default_crd(crd: dict[str, Any], internal: bool) -> None:
    spec = crd.setdefault("spec", {})
    names = spec.setdefault("names", {})
    if names.get("kind"):
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", f"{names['kind']}List")
    spec.setdefault("conversion", {"strategy": "None"})
    crd.pop("status", None)


_DEFAULTERS = {
    "pods": _default_pod,
    "resourceclaims": _default_resource_claim,
    "namespaces": _default_namespace,
    "resourcequotas": _default_resource_quota,
    "customresourcedefinitions": _default_crd,
}


def prepare_for_create(rtype: ResourceType, obj: dict[str, Any], *, internal: bool) -> None:
    """Default fields and reset client-supplied status where the real strategy does.

    Internal (controller) creates keep the status they bring, so a topology can seed nodes with
    capacity and a test can seed an allocated claim.
    """
    defaulter = _DEFAULTERS.get(rtype.key)
    if defaulter is not None:
        defaulter(obj, internal)
    elif rtype.crd is not None and rtype.status_subresource and not internal:
        obj.pop("status", None)
