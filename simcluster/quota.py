"""ResourceQuota admission and status for pods, Services, ResourceClaims and
PersistentVolumeClaims, with the keys, counting rules and `exceeded quota` wording of the
kube-apiserver's quota plugin and the quota controller."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from dracel.quantity import format_quantity
from dracel.quantity import parse as parse_quantity
from simcluster.errors import ApiError, qualified

if TYPE_CHECKING:
    from simcluster.store import AdmissionRequest, Store

RESOURCE_GROUP = "resource.k8s.io"
CLAIM_COUNT = "count/resourceclaims.resource.k8s.io"
DEVICE_CLASS_SUFFIX = ".deviceclass.resource.k8s.io/devices"
# An `All` request may get up to AllocationResultsMaxSize devices and is charged that much.
ALL_DEVICES_CHARGE = 32
# Keys every container must request explicitly once a quota limits them (a historical rule of
# the pod evaluator's Constraints check).
_CONTAINER_KEYS = {
    "requests.cpu": ("requests", "cpu"),
    "cpu": ("requests", "cpu"),
    "requests.memory": ("requests", "memory"),
    "memory": ("requests", "memory"),
    "limits.cpu": ("limits", "cpu"),
    "limits.memory": ("limits", "memory"),
}
_GROUPS = {
    "pods": "",
    "services": "",
    "resourceclaims": RESOURCE_GROUP,
    "persistentvolumeclaims": "",
    "secrets": "",
}
# Kinds whose updates are charged for what they add: a claim's expansion, a Service's type.
_CHARGED_ON_UPDATE = ("persistentvolumeclaims", "services")
STORAGE_CLASS_SUFFIX = ".storageclass.storage.k8s.io/"
_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


@dataclass(frozen=True)
class Quantity:
    """A summed quantity that remembers whether to print in binary (Gi) or decimal (500m) form,
    like resource.Quantity keeping the format of the first operand of an Add."""

    amount: Decimal
    binary: bool = False

    @classmethod
    def parse(cls, text: Any) -> Quantity:
        text = str(text)
        # Quantity.UnmarshalJSON trims surrounding spaces before it parses, as here.
        text = text.strip()
        return cls(parse_quantity(text), text.endswith(_BINARY_SUFFIXES))

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.amount + other.amount, self.binary)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.amount - other.amount, self.binary)

    def __str__(self) -> str:
        return format_quantity(self.amount, binary=self.binary)


ZERO = Quantity(Decimal(0))
ONE = Quantity(Decimal(1))
Usage = dict[str, Quantity]


def add_usage(total: Usage, delta: Mapping[str, Quantity]) -> None:
    for key, quantity in delta.items():
        total[key] = total[key] + quantity if key in total else quantity


def subtract_usage(total: Usage, delta: Mapping[str, Quantity]) -> None:
    for key, quantity in delta.items():
        left = total.get(key, ZERO) - quantity
        if left.amount:
            total[key] = left
        else:
            total.pop(key, None)


def container_resources(container: Mapping[str, Any]) -> dict[str, dict[str, Quantity]]:
    """requests and limits of one container, requests defaulted from limits as the API server
    does before admission sees the object."""
    resources = container.get("resources") or {}
    limits = {k: Quantity.parse(v) for k, v in (resources.get("limits") or {}).items()}
    requests = {k: Quantity.parse(v) for k, v in (resources.get("requests") or {}).items()}
    return {"requests": {**limits, **requests}, "limits": limits}


def pod_is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_usage(pod: Mapping[str, Any]) -> Usage:
    """What one pod charges: terminal pods charge nothing; compute is the larger of the sum over
    containers and the largest init container, per resource."""
    if pod_is_terminal(pod):
        return {}
    spec = pod.get("spec") or {}
    sums: dict[str, dict[str, Quantity]] = {"requests": {}, "limits": {}}
    for container in spec.get("containers") or []:
        for kind, values in container_resources(container).items():
            add_usage(sums[kind], values)
    for container in spec.get("initContainers") or []:
        for kind, values in container_resources(container).items():
            for name, quantity in values.items():
                current = sums[kind].get(name)
                if current is None or quantity.amount > current.amount:
                    sums[kind][name] = quantity
    usage: Usage = {"pods": ONE, "count/pods": ONE}
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in sums["requests"]:
            usage[f"requests.{name}"] = usage[name] = sums["requests"][name]
        if name in sums["limits"]:
            usage[f"limits.{name}"] = sums["limits"][name]
    return usage


def service_usage(service: Mapping[str, Any]) -> Usage:
    """What one Service charges, as the service evaluator counts: the object; every port of a
    NodePort Service, or of a LoadBalancer one (only those with an explicit nodePort when
    allocateLoadBalancerNodePorts is false); and one load balancer per LoadBalancer Service."""
    spec = service.get("spec") or {}
    ports = spec.get("ports") or []
    usage: Usage = {"services": ONE, "count/services": ONE}
    service_type = spec.get("type") or "ClusterIP"
    if service_type == "NodePort":
        node_ports = len(ports)
    elif service_type == "LoadBalancer":
        usage["services.loadbalancers"] = ONE
        node_ports = len(ports)
        if spec.get("allocateLoadBalancerNodePorts") is False:
            node_ports = sum(1 for port in ports if port.get("nodePort"))
    else:
        node_ports = 0
    if node_ports:
        usage["services.nodeports"] = Quantity(Decimal(node_ports))
    return usage


def claim_usage(claim: Mapping[str, Any]) -> Usage:
    """What one ResourceClaim charges: one object plus devices per class (ExactCount = count,
    All = 32, firstAvailable = the largest alternative per class)."""
    usage: Usage = {CLAIM_COUNT: ONE}
    requests = (((claim.get("spec") or {}).get("devices") or {}).get("requests")) or []
    for request in requests:
        if request.get("exactly"):
            alternatives = [request["exactly"]]
        else:
            alternatives = request.get("firstAvailable") or []
        largest: dict[str, int] = {}
        for alternative in alternatives:
            key = f"{alternative.get('deviceClassName', '')}{DEVICE_CLASS_SUFFIX}"
            largest[key] = max(largest.get(key, 0), requested_devices(alternative))
        add_usage(usage, {k: Quantity(Decimal(v)) for k, v in largest.items()})
    return usage


def pvc_usage(claim: Mapping[str, Any]) -> Usage:
    """What one PersistentVolumeClaim charges: one object and its storage request, in total
    and against its class (`<class>.storageclass.storage.k8s.io/requests.storage`)."""
    spec = claim.get("spec") or {}
    usage: Usage = {"persistentvolumeclaims": ONE, "count/persistentvolumeclaims": ONE}
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    class_name = spec.get("storageClassName") or ""
    if class_name:
        usage[f"{class_name}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"] = ONE
    if storage is not None:
        quantity = Quantity.parse(storage)
        usage["requests.storage"] = quantity
        if class_name:
            usage[f"{class_name}{STORAGE_CLASS_SUFFIX}requests.storage"] = quantity
    return usage


def secret_usage(secret: Mapping[str, Any]) -> Usage:
    """What one Secret charges: the object (the legacy `secrets` key and `count/secrets`)."""
    return {"secrets": ONE, "count/secrets": ONE}


_USAGE = {
    "pods": pod_usage,
    "secrets": secret_usage,
    "services": service_usage,
    "resourceclaims": claim_usage,
    "persistentvolumeclaims": pvc_usage,
}


def requested_devices(request: Mapping[str, Any]) -> int:
    """Devices one exact request or subrequest asks for, as the quota charges them; unknown
    modes charge nothing."""
    mode = request.get("allocationMode") or "ExactCount"
    if mode == "ExactCount":
        return int(request.get("count") or 1)
    if mode == "All":
        return ALL_DEVICES_CHARGE
    return 0


def quota_status(quota: Mapping[str, Any], usage: Usage) -> dict[str, dict[str, str]]:
    """status.hard mirrors spec.hard; status.used has every hard key, zero when unused."""
    hard = _hard(quota)
    return {
        "hard": {key: str(quantity) for key, quantity in hard.items()},
        "used": {key: str(usage.get(key, ZERO)) for key in hard},
    }


def _hard(quota: Mapping[str, Any]) -> dict[str, Quantity]:
    hard: dict[str, Quantity] = {}
    for key, value in ((quota.get("spec") or {}).get("hard") or {}).items():
        try:
            hard[key] = Quantity.parse(value)
        except ValueError:
            continue
    return hard


def _pretty(values: Mapping[str, Quantity]) -> str:
    return ",".join(f"{key}={values[key]}" for key in sorted(values))


def check_quota(
    quota: Mapping[str, Any],
    *,
    resource: str,
    name: str,
    obj: Mapping[str, Any],
    delta: Usage,
    used: Usage,
) -> None:
    """Raise the apiserver's 403 if admitting `delta` on top of `used` breaks this quota."""
    hard = _hard(quota)
    quota_name = quota["metadata"]["name"]
    if resource == "pods":
        missing = _missing_container_requests(obj, set(hard) & set(_CONTAINER_KEYS))
        if missing:
            raise _forbidden(resource, name, f"failed quota: {quota_name}: must specify {missing}")
    requested = {key: quantity for key, quantity in delta.items() if key in hard}
    exceeded = sorted(
        key
        for key, quantity in requested.items()
        if used.get(key, ZERO).amount + quantity.amount > hard[key].amount
    )
    if not exceeded:
        return
    message = (
        f"exceeded quota: {quota_name}, "
        f"requested: {_pretty({k: requested[k] for k in exceeded})}, "
        f"used: {_pretty({k: used.get(k, ZERO) for k in exceeded})}, "
        f"limited: {_pretty({k: hard[k] for k in exceeded})}"
    )
    raise _forbidden(resource, name, message)


def _missing_container_requests(pod: Mapping[str, Any], keys: set[str]) -> str:
    """`requests.cpu for: a,b; requests.memory for: a` naming containers that leave a limited
    compute resource unspecified; empty when all is specified."""
    missing: dict[str, set[str]] = {}
    spec = pod.get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container_resources(container)
        for key in keys:
            kind, resource_name = _CONTAINER_KEYS[key]
            if resource_name not in resources[kind]:
                missing.setdefault(key, set()).add(container.get("name", ""))
    return "; ".join(f"{key} for: {','.join(sorted(missing[key]))}" for key in sorted(missing))


def _forbidden(resource: str, name: str, reason: str) -> ApiError:
    group = _GROUPS.get(resource, "")
    prefix = f'{qualified(resource, group)} "{name}"' if name else qualified(resource, group)
    details: dict[str, Any] = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return ApiError.forbidden(f"{prefix} is forbidden: {reason}", details)


class QuotaController:
    """The admission plugin (on create of pods, ResourceClaims and PersistentVolumeClaims, and
    on a claim's expansion) plus the controller that
    keeps every ResourceQuota's status.hard/status.used current.

    What each namespace uses is kept as a running total of what each pod and claim charges
    (added when it comes, taken off when it goes or a pod finishes), as the real quota system
    works from status.used plus the request's delta instead of summing the namespace on every
    create, which made a burst of creates in one namespace quadratic."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # Our own status writes come back through the listener; this flag stops the echo.
        self._local = threading.local()
        self._charged: dict[tuple[str, str, str], Usage] = {}  # (resource, ns, name) -> usage
        self._totals: dict[str, Usage] = {}

    def install(self) -> None:
        with self.store.lock:
            for resource, usage_of in _USAGE.items():
                objects, _ = self.store.list_shared(resource)
                for obj in objects:
                    self._charge(resource, obj, usage_of(obj))
        self.store.add_admission(self.admit)
        self.store.add_listener(self.on_change)

    def _charge(self, resource: str, obj: Mapping[str, Any], usage: Usage) -> None:
        """Record what `obj` charges now, moving its namespace's total by the difference."""
        metadata = obj.get("metadata") or {}
        namespace = metadata.get("namespace") or ""
        key = (resource, namespace, metadata.get("name") or "")
        total = self._totals.setdefault(namespace, {})
        subtract_usage(total, self._charged.pop(key, {}))
        if usage:
            self._charged[key] = usage
            add_usage(total, usage)

    def admit(self, request: AdmissionRequest) -> None:
        if request.subresource or request.obj is None:
            return
        if request.resource not in _GROUPS or not request.namespace:
            return
        # An update is charged only for what it adds (a claim's expansion, a Service's type).
        if request.operation != "CREATE" and request.resource not in _CHARGED_ON_UPDATE:
            return
        with self.store.lock:
            quotas = self.store.list("resourcequotas", request.namespace)
            if not quotas:
                return
            delta = _USAGE[request.resource](request.obj)
            if request.old is not None:
                before = _USAGE[request.resource](request.old)
                delta = {
                    key: quantity - before[key] if key in before else quantity
                    for key, quantity in delta.items()
                }
                delta = {key: quantity for key, quantity in delta.items() if quantity.amount > 0}
                if not delta:
                    return
            used = self._usage(request.namespace)
            for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
                check_quota(
                    quota,
                    resource=request.resource,
                    name=request.name or "",
                    obj=request.obj,
                    delta=delta,
                    used=used,
                )

    def on_change(self, event_type: str, resource: str, obj: dict[str, Any]) -> None:
        if getattr(self._local, "syncing", False) or not _changes_usage(event_type, resource, obj):
            return
        if resource in _USAGE:
            usage: Usage = {} if event_type == "DELETED" else _USAGE[resource](obj)
            with self.store.lock:
                self._charge(resource, obj, usage)
        namespace = (obj.get("metadata") or {}).get("namespace")
        if namespace:
            self.sync_namespace(namespace)

    def sync_namespace(self, namespace: str) -> None:
        """Recompute status of every quota in the namespace, writing only what changed."""
        with self.store.lock:
            quotas = self.store.list("resourcequotas", namespace)
            if not quotas:
                return
            usage = self._usage(namespace)
            self._local.syncing = True
            try:
                for quota in quotas:
                    status = quota_status(quota, usage)
                    if quota.get("status") == status:
                        continue
                    quota["status"] = status
                    self.store.update("resourcequotas", quota, subresource="status", internal=True)
            finally:
                self._local.syncing = False

    def _usage(self, namespace: str) -> Usage:
        return dict(self._totals.get(namespace, {}))


def _changes_usage(event_type: str, resource: str, obj: Mapping[str, Any]) -> bool:
    """Whether a write can move status.used: objects coming and going, quotas changing, and pods
    finishing. Binding a pod or writing a claim's status (immutable spec) cannot."""
    if resource == "resourcequotas":
        return True
    if resource in ("resourceclaims", "secrets"):  # counted as objects: come and go
        return event_type != "MODIFIED"
    if resource == "pods":
        return event_type != "MODIFIED" or pod_is_terminal(obj)
    # A claim's class (retroactive default) or request (expansion) may change, and a
    # Service's type or ports.
    return resource in _CHARGED_ON_UPDATE
