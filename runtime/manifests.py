"""Pure builders of the Kubernetes objects behind a unit and its tenant, and the pure checks
that tell an object of ours from a foreign one of the same name: dict in, dict out, no I/O."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from catalog.validation import PRIMARY_ALTERNATIVE
from dracel import quantity

GROUP = "runtime.lokiwager.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
MANAGED_BY = "gpu-control-plane"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_UNIT = f"{GROUP}/unit"
LABEL_TENANT = f"{GROUP}/tenant"
LABEL_STORAGE = f"{GROUP}/storage"
LABEL_SECRET = f"{GROUP}/secret"
# The one label selector of what the control plane made (units' objects, storage claims).
OURS_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
STORAGE_SELECTOR = f"{OURS_SELECTOR},{LABEL_STORAGE}"
ANNOTATION_OPERATION = f"{GROUP}/operation-id"
ANNOTATION_REQUEST_HASH = f"{GROUP}/request-hash"
# On the pod: the hash of what it was built from, and the restart that asked for it.
ANNOTATION_TEMPLATE_HASH = f"{GROUP}/template-hash"
ANNOTATION_RESTARTED_AT = f"{GROUP}/restarted-at"
# On a unit's ResourceClaim: the hand-over it was made for ("" or absent: none). The claim's
# spec cannot change, so a unit whose hand-over changed gets a new claim (provisioning).
ANNOTATION_HANDOVER = f"{GROUP}/handover"
# The NoSchedule taint on devices handed over to one unit (value: its uid): only that unit's
# claim tolerates it, so no other claim is allocated them between release and its allocation.
HANDOVER_TAINT_KEY = f"{GROUP}/handover"
LABEL_HANDOVER = f"{GROUP}/handover-for"

POD_CLAIM_NAME = "gpu"
CONTAINER_NAME = "runtime-worker"
# The pod runs as this unprivileged user so it meets Pod Security "restricted" whatever the image.
RUN_AS_USER = 65532
# What the API server gives a pod that names no terminationGracePeriodSeconds.
KUBERNETES_DEFAULT_GRACE_SECONDS = 30


@dataclass(frozen=True)
class Handover:
    """Devices handed over to a unit: the taint value only its claim tolerates (its uid) and
    the CEL selector naming them ("" when they cannot be named by an attribute)."""

    value: str
    selector: str = ""

    @classmethod
    def of(cls, stored: dict | None) -> Handover | None:
        """From GPUUnit.handover ({} is none)."""
        if not stored or not stored.get("value"):
            return None
        return cls(value=str(stored["value"]), selector=str(stored.get("selector") or ""))

    def toleration(self) -> dict:
        return {
            "key": HANDOVER_TAINT_KEY,
            "operator": "Equal",
            "value": self.value,
            "effect": "NoSchedule",
        }


def handover_selector(devices: Iterable[tuple[str, str]]) -> str:
    """A CEL selector that matches exactly these devices, given as (driver, uuid) pairs: DRA's
    CEL sees a device's driver and attributes, not its name, so they are named by the uuid
    attribute their drivers publish (NVIDIA's and the example driver's alike). The driver is
    compared first: `&&` stops there for another driver's device, which has no such
    attribute domain."""
    by_driver: dict[str, list[str]] = {}
    for driver, uuid in sorted(set(devices)):
        by_driver.setdefault(driver, []).append(uuid)
    return " || ".join(
        f"(device.driver == {json.dumps(driver)} && "
        f"device.attributes[{json.dumps(driver)}].uuid in {json.dumps(uuids)})"
        for driver, uuids in by_driver.items()
    )


def claim_handover(claim: dict | None) -> str:
    """The hand-over a unit's claim was made for ("" for none)."""
    annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_HANDOVER) or "")


def handover_rule_name(value: str, driver: str, pool: str, device: str) -> str:
    """The DeviceTaintRule that keeps one handed-over device for the unit `value` names:
    deterministic, so a retried hand-over finds its own rules."""
    digest = hashlib.sha256(f"{driver}/{pool}/{device}".encode()).hexdigest()[:10]
    return f"handover-{value}-{digest}"


def build_handover_rule(
    *, name: str, handover: Handover, driver: str, pool: str, device: str, tenant: str
) -> dict:
    """A DeviceTaintRule (resource.k8s.io, served at v1alpha3 on 1.34-1.35, v1beta2 later:
    the caller sets apiVersion) tainting one device NoSchedule for one unit's claim."""
    return {
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": name,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_HANDOVER: handover.value,
                LABEL_TENANT: tenant,
            },
        },
        "spec": {
            "deviceSelector": {"driver": driver, "pool": pool, "device": device},
            "taint": {
                "key": HANDOVER_TAINT_KEY,
                "value": handover.value,
                "effect": "NoSchedule",
            },
        },
    }


@dataclass(frozen=True)
class UnitContract:
    """What the builders need to know about a unit (GPUUnit.contract() builds it)."""

    name: str
    namespace: str
    tenant: str
    operation_id: str
    request_hash: str
    package_id: str
    spec_name: str
    image: str
    cpu: str
    memory: str
    gpu: int
    device_class_name: str
    claim_name: str
    claim_request_name: str
    count: int
    selectors: list[str] = field(default_factory=list)
    capacity: dict[str, str] = field(default_factory=dict)
    # Fallbacks after the package's own class: [{name, deviceClassName, count, selectors?,
    # capacity?}] (catalog.validation.alternatives).
    alternatives: list[dict] = field(default_factory=list)
    match_attribute: str = ""  # every device of the unit agrees on it (claim constraints)
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    env: list[dict] = field(default_factory=list)
    ports: list[dict] = field(default_factory=list)
    access: dict[str, str] = field(default_factory=dict)
    storage_mounts: list[dict] = field(default_factory=list)
    memory_bytes: int = 0  # /dev/shm is sized half of it
    ephemeral_storage: str = ""  # the pod's ephemeral-storage ("": none, an older unit)
    termination_grace_seconds: int = KUBERNETES_DEFAULT_GRACE_SECONDS  # SIGTERM to SIGKILL
    ssh: bool = False
    ssh_image: str = ""
    run_policy: str = "Running"
    stop_after: str = ""
    restarted_at: str = ""  # RFC 3339, the last restart's time
    host_label: str = ""  # the unit's stored public host label (runtime/access.py), if any
    handover: Handover | None = None  # devices being handed over to it (its claim's pin)


class Part(StrEnum):
    """What one of a unit's objects is for; with the unit's name it decides the object's name."""

    POD = "pod"
    CLAIM = "claim"
    SERVICE = "service"  # the template's ports
    SSH_SERVICE = "ssh-service"
    SSH_KEYS = "ssh-keys"  # the ConfigMap of authorized keys
    ROUTE = "route"  # the HTTPRoute or Ingress publishing the primary HTTP port
    NETWORK_POLICY = "network-policy"


_NAME_SUFFIX = {Part.CLAIM: "-gpu", Part.SSH_SERVICE: "-ssh", Part.SSH_KEYS: "-ssh"}


def object_name(unit_name: str, part: Part) -> str:
    """The name of every object a unit has but its GPUUnit (named as the unit): deterministic,
    so create, update and teardown find them without storing them."""
    return f"unit-{unit_name}{_NAME_SUFFIX.get(part, '')}"


def claim_name_for(unit_name: str) -> str:
    return object_name(unit_name, Part.CLAIM)


def pod_name_for(unit_name: str) -> str:
    return object_name(unit_name, Part.POD)


def labels(contract: UnitContract) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_UNIT: contract.name,
        LABEL_TENANT: contract.tenant,
    }


def labelled_for(obj: dict, *, tenant: str, unit: str) -> bool:
    """Whether the object carries our labels for this tenant's unit."""
    found = (obj.get("metadata") or {}).get("labels") or {}
    return (
        found.get(LABEL_MANAGED_BY) == MANAGED_BY
        and found.get(LABEL_UNIT) == unit
        and found.get(LABEL_TENANT) == tenant
    )


def labelled_storage(obj: dict, *, tenant: str, name: str) -> bool:
    """Whether the claim carries our labels for this tenant's storage."""
    found = (obj.get("metadata") or {}).get("labels") or {}
    return (
        found.get(LABEL_MANAGED_BY) == MANAGED_BY
        and found.get(LABEL_TENANT) == tenant
        and found.get(LABEL_STORAGE) == name
    )


def is_unit_object(obj: dict, *, tenant: str, unit: str, operation_id: str) -> bool:
    """Whether the object is the GPUUnit of this unit: our labels and its operation."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return labelled_for(obj, tenant=tenant, unit=unit) and (
        annotations.get(ANNOTATION_OPERATION) == operation_id
    )


def owned_by(owner_uid: str, contract: UnitContract) -> Callable[[dict], bool]:
    """A check that an object is this unit's and owned by the GPUUnit with `owner_uid`."""

    def check(obj: dict) -> bool:
        owners = (obj.get("metadata") or {}).get("ownerReferences") or []
        return labelled_for(obj, tenant=contract.tenant, unit=contract.name) and any(
            owner.get("uid") == owner_uid for owner in owners
        )

    return check


def owner_reference(contract: UnitContract, owner_uid: str) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUUnit",
        "name": contract.name,
        "uid": owner_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def allocation(contract: UnitContract) -> dict:
    block: dict = {
        "deviceClassName": contract.device_class_name,
        "claimName": contract.claim_name,
        "claimRequestName": contract.claim_request_name,
        "count": contract.count,
    }
    if contract.selectors:
        block["selectors"] = list(contract.selectors)
    if contract.capacity:
        block["capacity"] = dict(contract.capacity)
    if contract.match_attribute:
        block["matchAttribute"] = contract.match_attribute
    if contract.alternatives:
        block["alternatives"] = [dict(alternative) for alternative in contract.alternatives]
    return block


def build_gpuunit(contract: UnitContract) -> dict:
    spec: dict = {
        "packageID": contract.package_id,
        "specName": contract.spec_name,
        "image": contract.image,
        "cpu": contract.cpu,
        "memory": contract.memory,
        "gpu": contract.gpu,
        "allocation": allocation(contract),
    }
    template = {
        key: value
        for key, value in (
            ("command", contract.command),
            ("args", contract.args),
            ("env", contract.env),
            ("ports", contract.ports),
        )
        if value
    }
    if template:
        spec["template"] = template
    if contract.access:
        spec["access"] = dict(contract.access)
    if contract.storage_mounts:
        spec["storageMounts"] = [dict(mount) for mount in contract.storage_mounts]
    if contract.ssh:
        # Whether SSH is on; the keys live in the unit's ConfigMap, never here.
        spec["ssh"] = {"enabled": True}
    if contract.stop_after:
        spec["stopAfter"] = contract.stop_after
    if contract.restarted_at:
        spec["restartedAt"] = contract.restarted_at
    spec["runPolicy"] = contract.run_policy
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUUnit",
        "metadata": {
            "name": contract.name,
            "namespace": contract.namespace,
            "labels": labels(contract),
            "annotations": {
                ANNOTATION_OPERATION: contract.operation_id,
                ANNOTATION_REQUEST_HASH: contract.request_hash,
            },
        },
        "spec": spec,
    }


def _device_request(
    device_class: str,
    count: int,
    selectors: list[str],
    capacity: dict[str, str],
    handover: Handover | None = None,
) -> dict:
    request: dict = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": count,
    }
    if handover is not None and handover.selector:
        selectors = [*selectors, handover.selector]
    if selectors:
        request["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if capacity:
        request["capacity"] = {"requests": dict(capacity)}
    if handover is not None:
        request["tolerations"] = [handover.toleration()]
    return request


def dropped_fields(sent: object, stored: object, path: str = "") -> list[str]:
    """The paths of what `sent` has and `stored` lacks: the fields an API server dropped from
    a write because the feature they belong to is off there (a 1.34 or 1.35 cluster drops a
    claim's `capacity` requests silently, for one). What the server added (its defaults) is
    not looked at, nor a zero value it leaves out as Go's omitempty does; lists are compared
    item by item."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path] if path else []
        missing = []
        for key, value in sent.items():
            here = f"{path}.{key}" if path else str(key)
            if key not in stored:
                if value:  # None, "", [], {}, 0 and False may be omitted
                    missing.append(here)
            else:
                missing += dropped_fields(value, stored[key], here)
        return missing
    if isinstance(sent, list):
        if not isinstance(stored, list):
            return [path]
        missing = [f"{path}[{index}]" for index in range(len(stored), len(sent))]
        for index, (value, kept) in enumerate(zip(sent, stored, strict=False)):
            missing += dropped_fields(value, kept, f"{path}[{index}]")
        return missing
    return []


def build_resource_claim(contract: UnitContract, *, owner_uid: str) -> dict:
    own = _device_request(
        contract.device_class_name,
        contract.count,
        contract.selectors,
        contract.capacity,
        contract.handover,
    )
    request: dict = {"name": contract.claim_request_name}
    if contract.alternatives:
        # A fallback package: the scheduler takes the first alternative that fits.
        request["firstAvailable"] = [
            {"name": PRIMARY_ALTERNATIVE, **own},
            *(
                {
                    "name": alternative["name"],
                    **_device_request(
                        alternative["deviceClassName"],
                        alternative["count"],
                        list(alternative.get("selectors") or []),
                        dict(alternative.get("capacity") or {}),
                        contract.handover,
                    ),
                }
                for alternative in contract.alternatives
            ),
        ]
    else:
        request["exactly"] = own
    devices: dict = {"requests": [request]}
    if contract.match_attribute:
        devices["constraints"] = [
            {"requests": [contract.claim_request_name], "matchAttribute": contract.match_attribute}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": contract.claim_name,
            "namespace": contract.namespace,
            "labels": labels(contract),
            "ownerReferences": [owner_reference(contract, owner_uid)],
            **(
                {"annotations": {ANNOTATION_HANDOVER: contract.handover.value}}
                if contract.handover is not None
                else {}
            ),
        },
        "spec": {"devices": devices},
    }


LABEL_RESERVATION = f"{GROUP}/reservation"
LABEL_RESERVATION_SLOT = f"{GROUP}/reservation-slot"
# What a placeholder pod asks for besides its claim: it runs pause, and the tenant's quota
# (which requires requests) counts it.
PLACEHOLDER_CPU = "10m"
PLACEHOLDER_MEMORY = "16Mi"
PLACEHOLDER_EPHEMERAL_STORAGE = "1Mi"


@dataclass(frozen=True)
class Placeholder:
    """One slot of a reservation: a claim asking for what a unit of its package asks for, and
    a minimal pod that holds it (a claim no pod uses is never allocated)."""

    name: str  # reservation-<name>-<slot>, the claim's and the pod's
    namespace: str
    tenant: str
    reservation_uid: str
    slot: int
    device_class_name: str
    count: int
    selectors: list[str] = field(default_factory=list)
    match_attribute: str = ""
    image: str = ""

    def labels(self) -> dict[str, str]:
        return {
            LABEL_MANAGED_BY: MANAGED_BY,
            LABEL_TENANT: self.tenant,
            LABEL_RESERVATION: self.reservation_uid,
            LABEL_RESERVATION_SLOT: str(self.slot),
        }


def build_placeholder_claim(placeholder: Placeholder) -> dict:
    devices: dict = {
        "requests": [
            {
                "name": "gpu",
                "exactly": _device_request(
                    placeholder.device_class_name, placeholder.count, placeholder.selectors, {}
                ),
            }
        ]
    }
    if placeholder.match_attribute:
        devices["constraints"] = [
            {"requests": ["gpu"], "matchAttribute": placeholder.match_attribute}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": placeholder.name,
            "namespace": placeholder.namespace,
            "labels": placeholder.labels(),
        },
        "spec": {"devices": devices},
    }


def build_placeholder_pod(placeholder: Placeholder) -> dict:
    requests = {
        "cpu": PLACEHOLDER_CPU,
        "memory": PLACEHOLDER_MEMORY,
        "ephemeral-storage": PLACEHOLDER_EPHEMERAL_STORAGE,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": placeholder.name,
            "namespace": placeholder.namespace,
            "labels": placeholder.labels(),
        },
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "resourceClaims": [{"name": "gpu", "resourceClaimName": placeholder.name}],
            "containers": [
                {
                    "name": "hold",
                    "image": placeholder.image,
                    "resources": {
                        "requests": dict(requests),
                        "limits": dict(requests),
                        "claims": [{"name": "gpu"}],
                    },
                    "securityContext": _restricted_context(),
                }
            ],
        },
    }


# The SSH server sidecar's share of the package's cpu and memory (taken from the workload's,
# so the pod asks for exactly what the package sells and the tenant's quota sees no more).
SSH_CPU_MILLICORES = 50
SSH_MEMORY_BYTES = 64 * 2**20
# A session runs in the sidecar and writes to its layer: its share of the package's ephemeral
# storage, taken from the workload's likewise.
SSH_EPHEMERAL_BYTES = 2**30
SSH_CONTAINER = "ssh-server"
SSH_KEYS_VOLUME = "ssh-keys"
SSH_KEYS_PATH = "/etc/ssh-keys"
SSH_PORT = 2222  # the sidecar listens here (a non-root sshd cannot bind 22)


def ssh_config_map_name(unit: str) -> str:
    return object_name(unit, Part.SSH_KEYS)


def ssh_service_name(unit: str) -> str:
    return object_name(unit, Part.SSH_SERVICE)


def _compute(contract: UnitContract) -> dict[str, str]:
    """The workload container's requests (= limits): the package's, less the SSH sidecar's
    share when it has one, so the pod as a whole asks for what the package says."""
    disk = {"ephemeral-storage": contract.ephemeral_storage} if contract.ephemeral_storage else {}
    if not contract.ssh:
        return {"cpu": contract.cpu, "memory": contract.memory, **disk}
    cpu = quantity.parse_cpu(contract.cpu) - SSH_CPU_MILLICORES
    memory = contract.memory_bytes - SSH_MEMORY_BYTES
    if disk:
        left = quantity.parse_bytes(contract.ephemeral_storage) - SSH_EPHEMERAL_BYTES
        disk["ephemeral-storage"] = quantity.format_bytes(max(left, 1))
    return {
        "cpu": quantity.format_cpu(max(cpu, 1)),
        "memory": quantity.format_bytes(max(memory, 1)),
        **disk,
    }


def _restricted_context() -> dict:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _ssh_sidecar(contract: UnitContract, mounts: list[dict]) -> dict:
    """sshd as a native sidecar (a restartable init container): it holds the same GPU claim
    and mounts as the workload, so a session sees the unit's GPUs, storage and /dev/shm."""
    share = {
        "cpu": quantity.format_cpu(SSH_CPU_MILLICORES),
        "memory": quantity.format_bytes(SSH_MEMORY_BYTES),
    }
    if contract.ephemeral_storage:
        share["ephemeral-storage"] = quantity.format_bytes(SSH_EPHEMERAL_BYTES)
    return {
        "name": SSH_CONTAINER,
        "image": contract.ssh_image,
        "imagePullPolicy": "IfNotPresent",
        "restartPolicy": "Always",
        "ports": [{"name": "ssh", "containerPort": SSH_PORT, "protocol": "TCP"}],
        "env": [
            {"name": "SSH_PORT", "value": str(SSH_PORT)},
            {"name": "SSH_AUTHORIZED_KEYS", "value": f"{SSH_KEYS_PATH}/authorized_keys"},
        ],
        "resources": {
            "requests": dict(share),
            "limits": dict(share),
            "claims": [{"name": POD_CLAIM_NAME, "request": contract.claim_request_name}],
        },
        "securityContext": _restricted_context(),
        "volumeMounts": [
            *mounts,
            {"name": SSH_KEYS_VOLUME, "mountPath": SSH_KEYS_PATH, "readOnly": True},
        ],
    }


def secret_object_name(secret: str) -> str:
    """The Kubernetes Secret holding the tenant's secret `secret` (/secrets)."""
    return f"secret-{secret}"


def build_secret(*, namespace: str, tenant: str, name: str, data: dict[str, str]) -> dict:
    """A tenant secret's Secret: `data` base64-encoded as the API stores it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_object_name(name),
            "namespace": namespace,
            "labels": secret_labels(tenant=tenant, name=name),
        },
        "type": "Opaque",
        "data": encode_secret_data(data),
    }


def secret_labels(*, tenant: str, name: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TENANT: tenant, LABEL_SECRET: name}


def encode_secret_data(data: dict[str, str]) -> dict[str, str]:
    return {key: base64.b64encode(value.encode()).decode("ascii") for key, value in data.items()}


def _env_var(entry: dict) -> dict:
    """A template env entry as the container's: a secret's key by reference (the kubelet
    reads the Secret; the value is in no object of ours), else the literal value."""
    ref = entry.get("secretRef")
    if ref:
        return {
            "name": entry["name"],
            "valueFrom": {
                "secretKeyRef": {"name": secret_object_name(ref["name"]), "key": ref["key"]}
            },
        }
    return {"name": entry["name"], "value": entry.get("value", "")}


def _termination_grace(contract: UnitContract) -> dict[str, int]:
    """The pod's grace after SIGTERM, written only when it is not the API server's default:
    the pod is the same either way, and the pod of a unit ordered before units had a grace
    keeps its template hash (a changed one would replace the running pod at the unit's next
    roll-out even when nothing else about it changed)."""
    if contract.termination_grace_seconds == KUBERNETES_DEFAULT_GRACE_SECONDS:
        return {}
    return {"terminationGracePeriodSeconds": contract.termination_grace_seconds}


def build_pod(contract: UnitContract, *, owner_uid: str) -> dict:
    compute = _compute(contract)
    container: dict = {
        "name": CONTAINER_NAME,
        "image": contract.image,
        "imagePullPolicy": "IfNotPresent",
        "env": [
            {"name": "SPEC_NAME", "value": contract.spec_name},
            {"name": "UNIT_NAME", "value": contract.name},
            {"name": "GPU_COUNT", "value": str(contract.gpu)},
            *(_env_var(e) for e in contract.env),
        ],
        # DRA is the only GPU allocation path: no nvidia.com/gpu requests or limits.
        "resources": {
            "requests": dict(compute),
            "limits": dict(compute),
            "claims": [{"name": POD_CLAIM_NAME, "request": contract.claim_request_name}],
        },
        "securityContext": _restricted_context(),
    }
    if contract.ports:
        container["ports"] = [
            {"name": p["name"], "containerPort": p["port"], "protocol": p.get("protocol", "TCP")}
            for p in contract.ports
        ]
    volumes, mounts = _volumes(contract)
    container["volumeMounts"] = mounts
    init_containers = []
    if contract.ssh:
        init_containers.append(_ssh_sidecar(contract, mounts))
        volumes.append(
            {
                "name": SSH_KEYS_VOLUME,
                "configMap": {"name": ssh_config_map_name(contract.name), "defaultMode": 0o444},
            }
        )
    if contract.command:
        container["command"] = list(contract.command)
    if contract.args:
        container["args"] = list(contract.args)
    annotations = {ANNOTATION_RESTARTED_AT: contract.restarted_at} if contract.restarted_at else {}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name_for(contract.name),
            "namespace": contract.namespace,
            "labels": labels(contract),
            "annotations": annotations,
            "ownerReferences": [owner_reference(contract, owner_uid)],
        },
        "spec": {
            "restartPolicy": "Always",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RUN_AS_USER,
                "runAsGroup": RUN_AS_USER,
                "fsGroup": RUN_AS_USER,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "resourceClaims": [{"name": POD_CLAIM_NAME, "resourceClaimName": contract.claim_name}],
            **({"initContainers": init_containers} if init_containers else {}),
            "containers": [container],
            "volumes": volumes,
            **_termination_grace(contract),
        },
    }
    # What the pod was built from, as a Deployment's pod-template-hash: a rollout replaces a
    # pod whose hash differs and adopts one whose hash is the same.
    annotations[ANNOTATION_TEMPLATE_HASH] = hashlib.sha256(
        json.dumps(pod, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()[:16]
    return pod


def template_hash(pod: dict | None) -> str:
    """The template hash a pod carries ("" for one built before hashes existed)."""
    annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(ANNOTATION_TEMPLATE_HASH, "")


def build_ssh_config_map(contract: UnitContract, *, owner_uid: str, public_keys: list[str]) -> dict:
    """The unit's authorized keys (public halves only) for its SSH sidecar."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ssh_config_map_name(contract.name),
            "namespace": contract.namespace,
            "labels": labels(contract),
            "ownerReferences": [owner_reference(contract, owner_uid)],
        },
        "data": {"authorized_keys": "".join(f"{key}\n" for key in public_keys)},
    }


def build_ssh_service(contract: UnitContract, *, owner_uid: str, service_type: str) -> dict:
    """`unit-<name>-ssh`: port 22 to the sidecar, published as the TCP service type says."""
    spec: dict = {
        "type": service_type,
        "selector": _unit_selector(contract),
        "ports": [{"name": "ssh", "port": 22, "targetPort": "ssh", "protocol": "TCP"}],
    }
    if service_type != "ClusterIP":
        spec["externalTrafficPolicy"] = "Local"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": ssh_service_name(contract.name),
            "namespace": contract.namespace,
            "labels": labels(contract),
            "ownerReferences": [owner_reference(contract, owner_uid)],
        },
        "spec": spec,
    }


SHM_VOLUME = "dshm"


def storage_claim_name(storage: str) -> str:
    return f"storage-{storage}"


def _volumes(contract: UnitContract) -> tuple[list[dict], list[dict]]:
    """The pod's volumes and the container's mounts: each storage mount's claim, and /dev/shm
    as memory sized half the package's memory (PyTorch's data loaders share tensors through
    it; a container's default 64Mi makes them fail)."""
    shm: dict = {"medium": "Memory"}
    if contract.memory_bytes:
        shm["sizeLimit"] = quantity.format_bytes(contract.memory_bytes // 2)
    volumes: list[dict] = [{"name": SHM_VOLUME, "emptyDir": shm}]
    mounts: list[dict] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    for mount in contract.storage_mounts:
        volume = storage_claim_name(mount["name"])
        volumes.append(
            {
                "name": volume,
                "persistentVolumeClaim": {
                    "claimName": volume,
                    **({"readOnly": True} if mount.get("readOnly") else {}),
                },
            }
        )
        mounts.append(
            {
                "name": volume,
                "mountPath": mount["mountPath"],
                **({"readOnly": True} if mount.get("readOnly") else {}),
            }
        )
    return volumes, mounts


def build_storage_claim(
    *, namespace: str, tenant: str, name: str, size: str, storage_class: str, access_mode: str
) -> dict:
    """A tenant storage's PersistentVolumeClaim (no storageClassName: the cluster's default)."""
    spec: dict = {"accessModes": [access_mode], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": storage_claim_name(name),
            "namespace": namespace,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_TENANT: tenant,
                LABEL_STORAGE: name,
            },
        },
        "spec": spec,
    }


def build_namespace(name: str, *, tenant: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_TENANT: tenant,
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/audit": "restricted",
            },
        },
    }


QUOTA_NAME = "gpu-units"


DEVICE_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"


def build_resource_quota(
    namespace: str,
    *,
    tenant: str,
    cpu: str,
    memory: str,
    claims: int,
    storage: str = "1Ti",
    storages: int = 16,
    devices: dict[str, int] | None = None,
    node_ports: int = 32,
    load_balancers: int = 8,
    ephemeral_storage: str = "1Ti",
    secrets: int = 64,
) -> dict:
    """The tenant's ResourceQuota; `devices`: per DeviceClass, what its claims may request
    (the DRA quota key `<class>.deviceclass.resource.k8s.io/devices`). `node_ports` counts
    every port of a NodePort or LoadBalancer Service, `load_balancers` the latter;
    `ephemeral_storage` bounds its pods' requests and limits alike; `secrets` the Secrets in
    the namespace (the tenant's secrets are its only ones)."""
    per_class = {
        f"{name}{DEVICE_QUOTA_SUFFIX}": str(count)
        for name, count in sorted((devices or {}).items())
    }
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": QUOTA_NAME,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TENANT: tenant},
        },
        "spec": {
            "hard": {
                "requests.cpu": cpu,
                "requests.memory": memory,
                "count/resourceclaims.resource.k8s.io": str(claims),
                "requests.storage": storage,
                "persistentvolumeclaims": str(storages),
                "services.nodeports": str(node_ports),
                "services.loadbalancers": str(load_balancers),
                "requests.ephemeral-storage": ephemeral_storage,
                "limits.ephemeral-storage": ephemeral_storage,
                "count/secrets": str(secrets),
                **per_class,
            }
        },
    }


def _unit_selector(contract: UnitContract) -> dict[str, str]:
    return {LABEL_UNIT: contract.name, LABEL_TENANT: contract.tenant}


def build_service(contract: UnitContract, *, owner_uid: str, service_type: str) -> dict:
    """`unit-<name>`: every template port, ClusterIP (or the configured NodePort or
    LoadBalancer type for a unit reached over tcp)."""
    spec: dict = {
        "type": service_type,
        "selector": _unit_selector(contract),
        "ports": [
            {
                "name": p["name"],
                "port": p["port"],
                "targetPort": p["name"],
                "protocol": p.get("protocol", "TCP"),
            }
            for p in contract.ports
        ],
    }
    if service_type != "ClusterIP":
        # Keep the client's address, so the unit's NetworkPolicy can admit it by port.
        spec["externalTrafficPolicy"] = "Local"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": object_name(contract.name, Part.SERVICE),
            "namespace": contract.namespace,
            "labels": labels(contract),
            "ownerReferences": [owner_reference(contract, owner_uid)],
        },
        "spec": spec,
    }


def build_http_route(
    contract: UnitContract,
    *,
    owner_uid: str,
    hostname: str,
    gateway_namespace: str,
    gateway_name: str,
    port: int,
) -> dict:
    """A Gateway API HTTPRoute from the configured Gateway to the unit's primary port."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": object_name(contract.name, Part.ROUTE),
            "namespace": contract.namespace,
            "labels": labels(contract),
            "ownerReferences": [owner_reference(contract, owner_uid)],
        },
        "spec": {
            "parentRefs": [
                {
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "namespace": gateway_namespace,
                    "name": gateway_name,
                }
            ],
            "hostnames": [hostname],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [
                        {"name": object_name(contract.name, Part.SERVICE), "port": port}
                    ],
                }
            ],
        },
    }


def build_ingress(
    contract: UnitContract, *, owner_uid: str, hostname: str, ingress_class: str, port: int
) -> dict:
    """The Ingress alternative to the HTTPRoute, for clusters with an ingress controller."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": object_name(contract.name, Part.ROUTE),
            "namespace": contract.namespace,
            "labels": labels(contract),
            "ownerReferences": [owner_reference(contract, owner_uid)],
        },
        "spec": {
            "ingressClassName": ingress_class,
            "rules": [
                {
                    "host": hostname,
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {
                                    "service": {
                                        "name": object_name(contract.name, Part.SERVICE),
                                        "port": {"number": port},
                                    }
                                },
                            }
                        ]
                    },
                }
            ],
        },
    }


# Addresses a unit may never reach, nor be reached from on a public port, whatever the cluster
# (the cluster's own pod, service and node ranges are added to these from settings). Each list
# is of one family, for the ipBlock of that family: an ipBlock's `except` entries must lie
# strictly inside its `cidr`.
BLOCKED_V4 = (
    "0.0.0.0/8",  # "this network" (RFC 1122, RFC 6890)
    "10.0.0.0/8",  # private (RFC 1918)
    "100.64.0.0/10",  # shared address space, carrier-grade NAT (RFC 6598)
    "127.0.0.0/8",  # loopback (RFC 1122)
    "169.254.0.0/16",  # link-local (RFC 3927)
    # Cloud metadata: AWS EC2 IMDS, Google Compute Engine, Azure IMDS and Oracle Cloud all
    # serve it here (their instance-metadata docs). Inside link-local; named so that it stays.
    "169.254.169.254/32",
    "172.16.0.0/12",  # private (RFC 1918)
    "192.168.0.0/16",  # private (RFC 1918)
    "224.0.0.0/4",  # multicast (RFC 5771)
    # Reserved (RFC 1112 §4, RFC 6890; limited broadcast 255.255.255.255, RFC 919, is in it),
    # never public, and some clusters number pods or nodes from it.
    "240.0.0.0/4",
)
BLOCKED_V6 = (
    "::1/128",  # loopback (RFC 4291)
    # NAT64, the well-known prefix (RFC 6052) and the local-use one (RFC 8215): a gateway turns
    # these into IPv4 addresses, private and metadata ones included, that the IPv4 block never
    # sees. Listing one in NETWORK_EGRESS_ALLOW gives IPv6-only units IPv4 again, those too.
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "fc00::/7",  # unique local (RFC 4193)
    # AWS EC2 IMDS over IPv6 (AWS docs, "Instance metadata service"). Inside fc00::/7; named
    # so that it stays.
    "fd00:ec2::254/128",
    "fe80::/10",  # link-local (RFC 4291 §2.5.6)
    "ff00::/8",  # multicast (RFC 4291 §2.7)
)
TENANT_POLICY = "gpu-units-isolation"


def _internet(cluster_cidrs: Iterable[str]) -> list[dict]:
    """Peers meaning "any public address": one ipBlock per family, each excepting the blocked
    ranges and the cluster's own ranges of its family (an ipBlock's `except` entries must be of
    its family), each range named once and in a stable order."""
    cluster = [ipaddress.ip_network(cidr) for cidr in cluster_cidrs]
    peers = []
    for everything, blocked in (("0.0.0.0/0", BLOCKED_V4), ("::/0", BLOCKED_V6)):
        version = ipaddress.ip_network(everything).version
        excepted = list(blocked)
        for network in cluster:
            if network.version == version and str(network) not in excepted:
                excepted.append(str(network))
        peers.append({"ipBlock": {"cidr": everything, "except": excepted}})
    return peers


def build_tenant_network_policy(
    namespace: str,
    *,
    tenant: str,
    gateway_namespace: str,
    egress_allow: list[str],
    cluster_cidrs: Iterable[str] = (),
) -> dict:
    """The tenant namespace's isolation (§11, §18), one policy over every pod in it: ingress
    only from the gateway's namespace (units admit their own pods and exposed ports by their
    own policy); egress to the cluster DNS, the public internet (the blocked ranges and the
    cluster's own pod, service and node ranges, `cluster_cidrs`, excepted) and the
    allow-listed CIDRs. Another tenant's pods, in another namespace, are neither."""
    ingress = []
    if gateway_namespace:
        ingress.append(
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": gateway_namespace}
                        }
                    }
                ]
            }
        )
    egress = [
        {
            "to": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                    },
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {"to": _internet(cluster_cidrs)},
    ]
    if egress_allow:
        egress.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in egress_allow]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": TENANT_POLICY,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_TENANT: tenant},
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }


def build_unit_network_policy(
    contract: UnitContract,
    *,
    owner_uid: str,
    public_ports: list[dict],
    cluster_cidrs: Iterable[str] = (),
) -> dict:
    """The unit's own ingress: from its own pods, and from public addresses on the ports it
    exposes outside the cluster (a NodePort or LoadBalancer Service with
    externalTrafficPolicy Local keeps the client's address). Pods, another tenant's or a
    sibling unit's, and nodes have the cluster's addresses (`cluster_cidrs`, or blocked
    ranges) and stay out."""
    ingress: list[dict] = [{"from": [{"podSelector": {"matchLabels": _unit_selector(contract)}}]}]
    if public_ports:
        ingress.append(
            {
                "from": _internet(cluster_cidrs),
                "ports": [
                    {"protocol": p.get("protocol", "TCP"), "port": p["port"]} for p in public_ports
                ],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": object_name(contract.name, Part.NETWORK_POLICY),
            "namespace": contract.namespace,
            "labels": labels(contract),
            "ownerReferences": [owner_reference(contract, owner_uid)],
        },
        "spec": {
            "podSelector": {"matchLabels": _unit_selector(contract)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
