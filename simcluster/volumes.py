"""Persistent volumes as a cluster with a dynamic provisioner runs them: the DefaultStorageClass
admission plugin, the PV controller (bind, provision, reclaim), the pvc/pv-protection
controllers, and what the scheduler's VolumeBinding plugin asks of a pod's claims."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simcluster.errors import ApiError, cause
from simcluster.quota import Quantity
from simcluster.store import clone, now_rfc3339

if TYPE_CHECKING:
    from simcluster.store import Store

logger = logging.getLogger(__name__)

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"
CONTROLLER = "persistentvolume-controller"
# Where the simulated provisioner says a volume's data lives on its node.
VOLUME_ROOT = "/var/lib/simcluster/volumes"
_WATCHED = ("persistentvolumeclaims", "persistentvolumes", "storageclasses", "pods")


@dataclass
class VolumeReport:
    """What one pass did, for tests."""

    provisioned: int = 0
    bound: int = 0
    reclaimed: int = 0
    released: int = 0
    pending: list[str] = field(default_factory=list)


def default_class(classes: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The default StorageClass; with several, the newest, as the real plugin picks since 1.26."""
    defaults = [
        sc
        for sc in classes
        if ((sc.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION)
        == "true"
    ]
    if not defaults:
        return None
    return max(
        defaults,
        key=lambda sc: (sc["metadata"].get("creationTimestamp", ""), sc["metadata"]["name"]),
    )


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The PVCs a pod mounts: named ones and the `<pod>-<volume>` claims of generic ephemeral
    volumes."""
    names = []
    pod_name = (pod.get("metadata") or {}).get("name", "")
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if (volume.get("persistentVolumeClaim") or {}).get("claimName"):
            names.append(volume["persistentVolumeClaim"]["claimName"])
        elif volume.get("ephemeral") is not None:
            names.append(f"{pod_name}-{volume.get('name', '')}")
    return names


def is_bound(claim: Mapping[str, Any]) -> bool:
    return bool((claim.get("spec") or {}).get("volumeName")) and (
        (claim.get("status") or {}).get("phase") == "Bound"
    )


@dataclass
class VolumeCheck:
    """The VolumeBinding plugin's view of a pending pod: a PreFilter failure message, the node
    selectors of the volumes already bound (a node must match them all), and the unbound
    WaitForFirstConsumer claims to provision once a node is chosen."""

    problem: str | None = None
    node_affinities: list[dict[str, Any]] = field(default_factory=list)
    delayed: list[dict[str, Any]] = field(default_factory=list)


def check_pod_volumes(store: Store, pod: Mapping[str, Any]) -> VolumeCheck:
    """Under store.lock. Messages are the scheduler's (`persistentvolumeclaim "x" not found`,
    `pod has unbound immediate PersistentVolumeClaims`)."""
    namespace = pod["metadata"]["namespace"]
    check = VolumeCheck()
    unbound_immediate = False
    for name in pod_claim_names(pod):
        claim = store.get_shared("persistentvolumeclaims", namespace, name)
        if claim is None:
            check.problem = f'persistentvolumeclaim "{name}" not found'
            return check
        if claim["metadata"].get("deletionTimestamp"):
            check.problem = f'persistentvolumeclaim "{name}" is being deleted'
            return check
        if is_bound(claim):
            volume = store.get_shared("persistentvolumes", None, claim["spec"]["volumeName"])
            affinity = (((volume or {}).get("spec") or {}).get("nodeAffinity") or {}).get(
                "required"
            )
            if affinity:
                check.node_affinities.append(affinity)
            continue
        class_name = (claim.get("spec") or {}).get("storageClassName")
        storage_class = store.get_shared("storageclasses", None, class_name) if class_name else None
        if storage_class is not None and (
            storage_class.get("volumeBindingMode") == "WaitForFirstConsumer"
        ):
            check.delayed.append(claim)
        else:
            unbound_immediate = True
    if unbound_immediate:
        check.problem = "pod has unbound immediate PersistentVolumeClaims"
    return check


def provision_for_node(store: Store, claims: Iterable[Mapping[str, Any]], node: str) -> None:
    """What happens between the scheduler choosing a node and binding the pod for delayed
    claims: the selected-node annotation, then provisioning on that node (under store.lock)."""
    for claim in claims:
        current = store.get(
            "persistentvolumeclaims", claim["metadata"]["namespace"], claim["metadata"]["name"]
        )
        if current is None or is_bound(current):
            continue
        current["metadata"].setdefault("annotations", {})[SELECTED_NODE_ANNOTATION] = node
        current = store.update("persistentvolumeclaims", current, internal=True)
        storage_class = store.get_shared(
            "storageclasses", None, current["spec"].get("storageClassName") or ""
        )
        if storage_class is not None:
            _provision(store, current, storage_class, node)


def _provision(
    store: Store, claim: dict[str, Any], storage_class: Mapping[str, Any], node: str | None
) -> dict[str, Any]:
    """Create `pvc-<uid>` for the claim and bind the two; returns the claim as stored."""
    metadata = claim["metadata"]
    spec = claim.get("spec") or {}
    name = f"pvc-{metadata['uid']}"
    provisioner = storage_class.get("provisioner", "")
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
    volume_spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": list(spec.get("accessModes") or []),
        "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or "Delete",
        "storageClassName": storage_class["metadata"]["name"],
        "volumeMode": spec.get("volumeMode") or "Filesystem",
        "claimRef": _claim_ref(claim),
        "hostPath": {
            "path": f"{VOLUME_ROOT}/{name}_{metadata['namespace']}_{metadata['name']}",
            "type": "DirectoryOrCreate",
        },
    }
    if storage_class.get("mountOptions"):
        volume_spec["mountOptions"] = list(storage_class["mountOptions"])
    if node:
        volume_spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                        ]
                    }
                ]
            }
        }
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "annotations": {"pv.kubernetes.io/provisioned-by": provisioner},
            "finalizers": [PV_PROTECTION],
        },
        "spec": volume_spec,
        "status": {"phase": "Bound"},
    }
    if store.get_shared("persistentvolumes", None, name) is None:
        store.create("persistentvolumes", volume, internal=True)
    bound = _bind_claim(store, claim, volume, provisioner=provisioner)
    _record_event(
        store,
        bound,
        "Normal",
        "ProvisioningSucceeded",
        f"Successfully provisioned volume {name}",
        component=provisioner,
    )
    return bound


def _claim_ref(claim: Mapping[str, Any]) -> dict[str, Any]:
    metadata = claim["metadata"]
    return {
        "kind": "PersistentVolumeClaim",
        "namespace": metadata["namespace"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "apiVersion": "v1",
        "resourceVersion": metadata.get("resourceVersion", ""),
    }


def _bind_claim(
    store: Store, claim: dict[str, Any], volume: Mapping[str, Any], *, provisioner: str = ""
) -> dict[str, Any]:
    updated = clone(claim)
    annotations = updated["metadata"].setdefault("annotations", {})
    annotations["pv.kubernetes.io/bind-completed"] = "yes"
    annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
    if provisioner:
        annotations["volume.beta.kubernetes.io/storage-provisioner"] = provisioner
        annotations["volume.kubernetes.io/storage-provisioner"] = provisioner
    updated["spec"]["volumeName"] = volume["metadata"]["name"]
    volume_spec = volume.get("spec") or {}
    updated["status"] = {
        **(updated.get("status") or {}),
        "phase": "Bound",
        "accessModes": list(volume_spec.get("accessModes") or []),
        "capacity": dict(volume_spec.get("capacity") or {}),
    }
    return store.update("persistentvolumeclaims", updated, internal=True)


def _record_event(
    store: Store,
    obj: Mapping[str, Any],
    kind: str,
    reason: str,
    message: str,
    *,
    component: str = CONTROLLER,
) -> None:
    metadata = obj["metadata"]
    namespace = metadata.get("namespace") or "default"
    now = now_rfc3339()
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{metadata['name']}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion", "v1"),
            "kind": obj.get("kind", ""),
            "namespace": metadata.get("namespace", ""),
            "name": metadata["name"],
            "uid": metadata.get("uid", ""),
            "resourceVersion": metadata.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        store.create("events", event, internal=True)
    except ApiError as exc:
        logger.debug("event for %s not recorded: %s", metadata["name"], exc)


def _fits(volume: Mapping[str, Any], claim: Mapping[str, Any]) -> bool:
    """A static PV fits a claim with its class, at least its size and all its access modes."""
    spec, volume_spec = claim.get("spec") or {}, volume.get("spec") or {}
    if (volume.get("status") or {}).get("phase") != "Available" or volume_spec.get("claimRef"):
        return False
    if (volume_spec.get("storageClassName") or "") != (spec.get("storageClassName") or ""):
        return False
    if (volume_spec.get("volumeMode") or "Filesystem") != (spec.get("volumeMode") or "Filesystem"):
        return False
    if not set(spec.get("accessModes") or []) <= set(volume_spec.get("accessModes") or []):
        return False
    wanted = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
    offered = (volume_spec.get("capacity") or {}).get("storage", "0")
    return Quantity.parse(offered).amount >= Quantity.parse(wanted).amount


class VolumeController:
    """Level-based like the scheduler: every pass recomputes from the store."""

    def __init__(self, store: Store, *, tick: float = 1.0) -> None:
        self.store = store
        self.tick = tick
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pass_thread: int | None = None
        # The one event each claim gets for why it waits, by uid: not repeated every pass.
        self._told: dict[str, str] = {}

    def install(self) -> None:
        self.store.add_mutation(self.mutate)
        self.store.add_listener(self._on_change)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="simcluster-volumes", daemon=True)
        self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.tick)
            self._wake.clear()
            if self._stopping.is_set():
                break
            try:
                self.run_once()
            except Exception:
                logger.exception("volume controller pass failed")

    def _on_change(self, event_type: str, resource: str, obj: dict[str, Any]) -> None:
        if self._pass_thread == threading.get_ident() or resource not in _WATCHED:
            return
        if resource == "pods" and not (
            event_type == "DELETED"
            or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        ):
            return
        self._wake.set()

    def mutate(
        self, operation: str, resource: str, new: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        """Admission: the default class and the protection finalizers on create; expansion
        only of dynamically provisioned claims whose class allows it, and never a shrink."""
        if operation == "CREATE" and resource == "persistentvolumeclaims":
            spec = new.setdefault("spec", {})
            if spec.get("storageClassName") is None:
                found = default_class(self.store.list_shared("storageclasses")[0])
                if found is not None:
                    spec["storageClassName"] = found["metadata"]["name"]
            _add_finalizer(new, PVC_PROTECTION)
        elif operation == "CREATE" and resource == "persistentvolumes":
            _add_finalizer(new, PV_PROTECTION)
        elif operation == "UPDATE" and resource == "persistentvolumeclaims" and old is not None:
            self._check_resize(new, old)

    def _check_resize(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        def size(claim: Mapping[str, Any]) -> Any:
            requests = ((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}
            return Quantity.parse(requests.get("storage", "0")).amount

        wanted, before = size(new), size(old)
        if wanted == before:
            return
        name = new["metadata"]["name"]
        if wanted < before:
            raise ApiError.invalid(
                "PersistentVolumeClaim",
                name,
                [
                    cause(
                        "FieldValueForbidden",
                        "spec.resources.requests.storage",
                        "Forbidden: field can not be less than status.capacity",
                    )
                ],
            )
        class_name = (new.get("spec") or {}).get("storageClassName") or ""
        storage_class = self.store.get_shared("storageclasses", None, class_name)
        if not is_bound(old) or not (storage_class or {}).get("allowVolumeExpansion"):
            raise ApiError.forbidden(
                f'persistentvolumeclaims "{name}" is forbidden: only dynamically provisioned '
                "pvc can be resized and the storageclass that provisions the pvc must support "
                "resize",
                {"name": name, "kind": "persistentvolumeclaims"},
            )

    # -- one pass ---------------------------------------------------------------------------

    def run_once(self) -> VolumeReport:
        with self.store.lock:
            self._pass_thread = threading.get_ident()
            try:
                return self._pass()
            finally:
                self._pass_thread = None

    def _pass(self) -> VolumeReport:
        store = self.store
        report = VolumeReport()
        classes = {sc["metadata"]["name"]: sc for sc in store.list_shared("storageclasses")[0]}
        fallback = default_class(classes.values())
        in_use = {
            (pod["metadata"]["namespace"], name)
            for pod in store.list_shared("pods")[0]
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            for name in pod_claim_names(pod)
        }
        for claim in list(store.list_shared("persistentvolumeclaims")[0]):
            self._sync_claim(claim, classes, fallback, in_use, report)
        claims = {c["metadata"]["uid"] for c in store.list_shared("persistentvolumeclaims")[0]}
        for volume in list(store.list_shared("persistentvolumes")[0]):
            self._sync_volume(volume, claims, report)
        live = {c["metadata"]["uid"] for c in store.list_shared("persistentvolumeclaims")[0]}
        self._told = {uid: reason for uid, reason in self._told.items() if uid in live}
        return report

    def _sync_claim(
        self,
        claim: dict[str, Any],
        classes: Mapping[str, Mapping[str, Any]],
        fallback: Mapping[str, Any] | None,
        in_use: set[tuple[str, str]],
        report: VolumeReport,
    ) -> None:
        store = self.store
        metadata = claim["metadata"]
        if metadata.get("deletionTimestamp"):
            if (metadata["namespace"], metadata["name"]) not in in_use and PVC_PROTECTION in (
                metadata.get("finalizers") or []
            ):
                updated = clone(claim)
                updated["metadata"]["finalizers"] = [
                    f for f in metadata["finalizers"] if f != PVC_PROTECTION
                ]
                store.update("persistentvolumeclaims", updated, internal=True)
            return
        spec = claim.get("spec") or {}
        if is_bound(claim):
            self._grow(claim)
            return
        if spec.get("volumeName"):
            volume = store.get_shared("persistentvolumes", None, spec["volumeName"])
            ref = ((volume or {}).get("spec") or {}).get("claimRef") or {}
            if volume is not None and (not ref or ref.get("uid") == metadata["uid"]):
                self._bind_static(claim, volume)
                report.bound += 1
            else:
                report.pending.append(metadata["name"])
            return
        if spec.get("storageClassName") is None and fallback is not None:
            # Retroactive default class assignment (GA in 1.28).
            updated = clone(claim)
            updated["spec"]["storageClassName"] = fallback["metadata"]["name"]
            claim = store.update("persistentvolumeclaims", updated, internal=True)
            spec = claim["spec"]
        static = sorted(
            (v for v in store.list_shared("persistentvolumes")[0] if _fits(v, claim)),
            key=lambda v: (
                Quantity.parse((v["spec"].get("capacity") or {}).get("storage", "0")).amount
            ),
        )
        if static:
            self._bind_static(claim, static[0])
            report.bound += 1
            return
        class_name = spec.get("storageClassName")
        storage_class = classes.get(class_name) if class_name else None
        if storage_class is None:
            report.pending.append(metadata["name"])
            if class_name:
                self._tell(
                    claim,
                    "Warning",
                    "ProvisioningFailed",
                    f'storageclass.storage.k8s.io "{class_name}" not found',
                )
            else:
                self._tell(
                    claim,
                    "Normal",
                    "FailedBinding",
                    "no persistent volumes available for this claim and no storage class is set",
                )
            return
        node = (metadata.get("annotations") or {}).get(SELECTED_NODE_ANNOTATION)
        if storage_class.get("volumeBindingMode") == "WaitForFirstConsumer" and not node:
            report.pending.append(metadata["name"])
            self._tell(
                claim,
                "Normal",
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            )
            return
        _provision(store, claim, storage_class, node)
        report.provisioned += 1

    def _tell(self, claim: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        uid = claim["metadata"]["uid"]
        if self._told.get(uid) == message:
            return
        self._told[uid] = message
        _record_event(self.store, claim, kind, reason, message)

    def _bind_static(self, claim: dict[str, Any], volume: Mapping[str, Any]) -> None:
        updated = clone(volume)
        updated["spec"]["claimRef"] = _claim_ref(claim)
        updated["status"] = {**(updated.get("status") or {}), "phase": "Bound"}
        stored = self.store.update("persistentvolumes", updated, internal=True)
        _bind_claim(self.store, claim, stored)

    def _grow(self, claim: Mapping[str, Any]) -> None:
        """Expansion of a bound claim: the PV and status.capacity follow the new request."""
        wanted = ((claim["spec"].get("resources") or {}).get("requests") or {}).get("storage")
        have = ((claim.get("status") or {}).get("capacity") or {}).get("storage")
        if not wanted or not have or Quantity.parse(wanted).amount <= Quantity.parse(have).amount:
            return
        volume = self.store.get("persistentvolumes", None, claim["spec"]["volumeName"])
        if volume is not None:
            volume["spec"].setdefault("capacity", {})["storage"] = wanted
            self.store.update("persistentvolumes", volume, internal=True)
        updated = clone(claim)
        updated["status"]["capacity"] = {**updated["status"].get("capacity", {}), "storage": wanted}
        self.store.update("persistentvolumeclaims", updated, internal=True)

    def _sync_volume(self, volume: dict[str, Any], claims: set[str], report: VolumeReport) -> None:
        store = self.store
        spec = volume.get("spec") or {}
        ref = spec.get("claimRef") or {}
        phase = (volume.get("status") or {}).get("phase")
        deleting = bool(volume["metadata"].get("deletionTimestamp"))
        # A claimRef without a uid pre-binds a static volume to a claim still to come.
        claim_gone = bool(ref.get("uid")) and ref["uid"] not in claims
        if deleting:
            if (not ref or claim_gone) and PV_PROTECTION in (
                volume["metadata"].get("finalizers") or []
            ):
                updated = clone(volume)
                updated["metadata"]["finalizers"] = [
                    f for f in updated["metadata"]["finalizers"] if f != PV_PROTECTION
                ]
                store.update("persistentvolumes", updated, internal=True)
            return
        if claim_gone and phase in ("Bound", "Pending", None):
            if spec.get("persistentVolumeReclaimPolicy") == "Delete":
                updated = clone(volume)
                updated["metadata"]["finalizers"] = [
                    f for f in updated["metadata"].get("finalizers") or [] if f != PV_PROTECTION
                ]
                if not updated["metadata"]["finalizers"]:
                    del updated["metadata"]["finalizers"]
                stored = store.update("persistentvolumes", updated, internal=True)
                store.delete("persistentvolumes", None, stored["metadata"]["name"], internal=True)
                report.reclaimed += 1
            else:
                updated = clone(volume)
                updated["status"] = {**(updated.get("status") or {}), "phase": "Released"}
                store.update("persistentvolumes", updated, internal=True)
                report.released += 1
            return
        if not ref and phase in ("Pending", None):
            updated = clone(volume)
            updated["status"] = {**(updated.get("status") or {}), "phase": "Available"}
            store.update("persistentvolumes", updated, internal=True)


def _add_finalizer(obj: dict[str, Any], finalizer: str) -> None:
    finalizers = obj["metadata"].setdefault("finalizers", [])
    if finalizer not in finalizers:
        finalizers.append(finalizer)
