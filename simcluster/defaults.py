"""Server-side defaulting and status initialisation on create, as the real registries do it."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Any

from simcluster.errors import ApiError
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
    for volume in spec.get("volumes") or []:
        for source in ("secret", "configMap"):
            if isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 0o644)
    if not internal or not pod.get("status"):
        pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def _default_exact(request: dict[str, Any]) -> None:
    request.setdefault("allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount":
        request.setdefault("count", 1)
    for toleration in request.get("tolerations") or []:
        if isinstance(toleration, dict) and not toleration.get("operator"):
            toleration["operator"] = "Equal"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _default_taint(taint: Any) -> None:
    """A taint without timeAdded gets the time of this write (SetDefaults_DeviceTaint)."""
    if isinstance(taint, dict) and not taint.get("timeAdded"):
        taint["timeAdded"] = _now()


def _default_resource_slice(resource_slice: dict[str, Any], internal: bool) -> None:
    for device in (resource_slice.get("spec") or {}).get("devices") or []:
        for taint in (device.get("taints") if isinstance(device, dict) else None) or []:
            _default_taint(taint)


def _default_device_taint_rule(rule: dict[str, Any], internal: bool) -> None:
    if not internal:
        # Its status (1.35 on) is the eviction controller's to write, through /status.
        rule.pop("status", None)
    spec = rule.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("taint"), dict):
        _default_taint(spec["taint"])


def _default_claim_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    for request in (spec.get("devices") or {}).get("requests") or []:
        if isinstance(request.get("exactly"), dict):
            _default_exact(request["exactly"])
        for subrequest in request.get("firstAvailable") or []:
            _default_exact(subrequest)


def _default_resource_claim(claim: dict[str, Any], internal: bool) -> None:
    _default_claim_spec(claim.get("spec"))
    if not internal:
        claim.pop("status", None)


def _default_resource_claim_template(template: dict[str, Any], internal: bool) -> None:
    _default_claim_spec((template.get("spec") or {}).get("spec"))


def _default_namespace(namespace: dict[str, Any], internal: bool) -> None:
    name = namespace["metadata"].get("name")
    if name:
        namespace["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    namespace.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    namespace["status"] = {"phase": "Active"}


def _default_resource_quota(quota: dict[str, Any], internal: bool) -> None:
    if not internal:
        quota.pop("status", None)


def _default_service(service: dict[str, Any], internal: bool) -> None:
    spec = service.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    if spec["type"] != "ExternalName":
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        if "port" in port:
            port.setdefault("targetPort", port["port"])
    if not internal or not service.get("status"):
        service["status"] = {"loadBalancer": {}}


def merge_string_data(secret: dict[str, Any]) -> None:
    """stringData is write-only: its keys overwrite data's, base64-encoded, and it is never
    stored, as the v1 → internal conversion does. Values never appear in an error."""
    data = secret.get("data")
    if data is not None and not isinstance(data, dict):
        raise ApiError.bad_request(_secret_decode_error("data must be an object"))
    for key, value in (data or {}).items():
        if not isinstance(value, str):
            raise ApiError.bad_request(_secret_decode_error(f"data[{key}] must be a string"))
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError.bad_request(
                _secret_decode_error(f"illegal base64 data in data[{key}]")
            ) from None
    string_data = secret.pop("stringData", None)
    if string_data is None:
        return
    if not isinstance(string_data, dict) or not all(
        isinstance(value, str) for value in string_data.values()
    ):
        raise ApiError.bad_request(_secret_decode_error("stringData values must be strings"))
    merged = dict(data or {})
    for key, value in string_data.items():
        merged[key] = base64.b64encode(value.encode()).decode()
    secret["data"] = merged


def _secret_decode_error(detail: str) -> str:
    return f'Secret in version "v1" cannot be handled as a Secret: {detail}'


def _default_secret(secret: dict[str, Any], internal: bool) -> None:
    merge_string_data(secret)
    secret.setdefault("type", "Opaque")


def _default_pvc(claim: dict[str, Any], internal: bool) -> None:
    spec = claim.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    if not internal or not claim.get("status"):
        claim["status"] = {"phase": "Pending"}


def _default_pv(volume: dict[str, Any], internal: bool) -> None:
    spec = volume.setdefault("spec", {})
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")
    if not internal or not volume.get("status"):
        volume["status"] = {"phase": "Pending"}


def _default_storage_class(storage_class: dict[str, Any], internal: bool) -> None:
    storage_class.setdefault("reclaimPolicy", "Delete")
    storage_class.setdefault("volumeBindingMode", "Immediate")


def _default_network_policy(policy: dict[str, Any], internal: bool) -> None:
    spec = policy.setdefault("spec", {})
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress", *(["Egress"] if spec.get("egress") else [])]
    for rule in [*(spec.get("ingress") or []), *(spec.get("egress") or [])]:
        for port in rule.get("ports") or []:
            port.setdefault("protocol", "TCP")


def _default_ingress(ingress: dict[str, Any], internal: bool) -> None:
    if not internal or not ingress.get("status"):
        ingress["status"] = {"loadBalancer": {}}


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
    "resourceclaimtemplates": _default_resource_claim_template,
    "namespaces": _default_namespace,
    "resourcequotas": _default_resource_quota,
    "customresourcedefinitions": _default_crd,
    "services": _default_service,
    "secrets": _default_secret,
    "persistentvolumeclaims": _default_pvc,
    "persistentvolumes": _default_pv,
    "storageclasses": _default_storage_class,
    "networkpolicies": _default_network_policy,
    "ingresses": _default_ingress,
    "resourceslices": _default_resource_slice,
    "devicetaintrules": _default_device_taint_rule,
}

# Kinds whose every write is defaulted again (the real server defaults on each decode); the
# status they carry is the stored one, so only spec-side defaults apply.
_UPDATE_DEFAULTERS = {
    "services": _default_service,
    "secrets": _default_secret,
    "persistentvolumeclaims": _default_pvc,
    "persistentvolumes": _default_pv,
    "storageclasses": _default_storage_class,
    "networkpolicies": _default_network_policy,
    "resourceslices": _default_resource_slice,
    "devicetaintrules": _default_device_taint_rule,
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


def prepare_for_update(rtype: ResourceType, new: dict[str, Any], old: dict[str, Any]) -> None:
    """Default an updated object; a Service keeps the cluster IPs and node ports it was given
    when the update leaves them out (what lets `kubectl apply` of a manifest without them
    succeed)."""
    defaulter = _UPDATE_DEFAULTERS.get(rtype.key)
    if defaulter is None:
        return
    defaulter(new, True)
    if rtype.key == "services":
        _keep_allocated(new, old)
    if rtype.key == "devicetaintrules":
        _retime_changed_effect(new, old)


def _retime_changed_effect(new: dict[str, Any], old: dict[str, Any]) -> None:
    """A rule whose effect changes while its timeAdded stays gets a new timeAdded, so that it
    tells when the effect was added, which tolerationSeconds count from (the strategy's
    PrepareForUpdate)."""
    taint = (new.get("spec") or {}).get("taint")
    old_taint = (old.get("spec") or {}).get("taint") or {}
    if (
        isinstance(taint, dict)
        and taint.get("effect") != old_taint.get("effect")
        and taint.get("timeAdded") == old_taint.get("timeAdded")
    ):
        taint["timeAdded"] = _now()


def _keep_allocated(new: dict[str, Any], old: dict[str, Any]) -> None:
    spec, old_spec = new.setdefault("spec", {}), old.get("spec") or {}
    if not spec.get("clusterIP") and not spec.get("clusterIPs") and old_spec.get("clusterIP"):
        for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if key in old_spec:
                spec.setdefault(key, old_spec[key])
    node_port_types = ("NodePort", "LoadBalancer")
    if spec.get("type") in node_port_types and old_spec.get("type") in node_port_types:
        ports = spec.get("ports") or []
        used = {p.get("nodePort") for p in ports if p.get("nodePort")}
        by_name = {p.get("name", ""): p.get("nodePort") for p in old_spec.get("ports") or []}
        for port in ports:
            kept = by_name.get(port.get("name", ""))
            if not port.get("nodePort") and kept and kept not in used:
                port["nodePort"] = kept
                used.add(kept)
