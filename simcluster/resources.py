"""The kinds the simulated server serves: built-ins plus kinds registered from CRDs."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]

# Fields every kind can be selected on; the rest are per kind, as the real server registers them.
COMMON_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass
class ResourceType:
    """One served resource: names, scope and the behaviour switches the store needs."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    status_subresource: bool = False
    # Extra field selectors beyond metadata.name/namespace (path → jsonPath-ish dotted path).
    field_selectors: dict[str, str] = field(default_factory=dict)
    # Real DELETE returns the object for these kinds and a Status for the others.
    delete_returns_object: bool = True
    verbs: list[str] = field(default_factory=lambda: list(ALL_VERBS))
    # Subresources besides status, for discovery: (name, kind, verbs).
    subresources: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    # For CRD-served kinds: the CRD version entry (schema, subresources, printer columns).
    crd: dict[str, Any] | None = None

    @property
    def key(self) -> str:
        """Store key: the plural for built-ins, `<plural>.<group>` for CRD kinds."""
        return self.plural if self.crd is None else f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def supports_field(self, name: str) -> bool:
        return name in COMMON_FIELDS or name in self.field_selectors


def _builtins() -> list[ResourceType]:
    pod_fields = {
        name: name
        for name in (
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        )
    }
    event_fields = {
        name: name
        for name in (
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        )
    }
    event_fields["source"] = "source.component"
    return [
        ResourceType(
            "",
            "v1",
            "Namespace",
            "namespaces",
            "namespace",
            False,
            short_names=["ns"],
            status_subresource=True,
            field_selectors={"status.phase": "status.phase"},
        ),
        ResourceType(
            "",
            "v1",
            "Node",
            "nodes",
            "node",
            False,
            short_names=["no"],
            status_subresource=True,
            field_selectors={"spec.unschedulable": "spec.unschedulable"},
            delete_returns_object=False,
        ),
        ResourceType(
            "",
            "v1",
            "Pod",
            "pods",
            "pod",
            True,
            short_names=["po"],
            categories=["all"],
            status_subresource=True,
            field_selectors=pod_fields,
            subresources=(("binding", "Binding", ("create",)), ("log", "Pod", ("get",))),
        ),
        ResourceType(
            "",
            "v1",
            "ResourceQuota",
            "resourcequotas",
            "resourcequota",
            True,
            short_names=["quota"],
            status_subresource=True,
        ),
        ResourceType(
            "",
            "v1",
            "Event",
            "events",
            "event",
            True,
            short_names=["ev"],
            field_selectors=event_fields,
            delete_returns_object=False,
        ),
        ResourceType(
            "",
            "v1",
            "Service",
            "services",
            "service",
            True,
            short_names=["svc"],
            categories=["all"],
            status_subresource=True,
        ),
        ResourceType(
            "",
            "v1",
            "Secret",
            "secrets",
            "secret",
            True,
            field_selectors={"type": "type"},
            delete_returns_object=False,
        ),
        ResourceType(
            "",
            "v1",
            "ConfigMap",
            "configmaps",
            "configmap",
            True,
            short_names=["cm"],
            delete_returns_object=False,
        ),
        ResourceType(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            True,
            short_names=["pvc"],
            status_subresource=True,
        ),
        ResourceType(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            "persistentvolume",
            False,
            short_names=["pv"],
            status_subresource=True,
        ),
        ResourceType(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            "storageclass",
            False,
            short_names=["sc"],
        ),
        ResourceType(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            "networkpolicy",
            True,
            short_names=["netpol"],
            delete_returns_object=False,
        ),
        ResourceType(
            "networking.k8s.io",
            "v1",
            "Ingress",
            "ingresses",
            "ingress",
            True,
            short_names=["ing"],
            status_subresource=True,
            delete_returns_object=False,
        ),
        ResourceType("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", "deviceclass", False),
        ResourceType(
            "resource.k8s.io",
            "v1",
            "ResourceClaim",
            "resourceclaims",
            "resourceclaim",
            True,
            status_subresource=True,
        ),
        ResourceType(
            "resource.k8s.io",
            "v1",
            "ResourceClaimTemplate",
            "resourceclaimtemplates",
            "resourceclaimtemplate",
            True,
        ),
        ResourceType(
            "resource.k8s.io",
            "v1",
            "ResourceSlice",
            "resourceslices",
            "resourceslice",
            False,
            field_selectors={"spec.nodeName": "spec.nodeName", "spec.driver": "spec.driver"},
        ),
        # Every version some emulated version serves; the Store keeps those of its version
        # (FeatureGates.device_taint_rule_versions), or none where the gates leave it off.
        *(
            ResourceType(
                "resource.k8s.io",
                version,
                "DeviceTaintRule",
                "devicetaintrules",
                "devicetaintrule",
                False,
            )
            for version in ("v1beta2", "v1alpha3")
        ),
        ResourceType(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            "customresourcedefinition",
            False,
            short_names=["crd", "crds"],
            status_subresource=True,
            delete_returns_object=False,
        ),
    ]


def crd_resource_types(crd: dict[str, Any]) -> list[ResourceType]:
    """One ResourceType per served version of a CRD (the store key is version-independent)."""
    spec = crd["spec"]
    names = spec["names"]
    types = []
    for version in spec.get("versions", []):
        if not version.get("served", True):
            continue
        selectable = {
            entry["jsonPath"].lstrip("."): entry["jsonPath"].lstrip(".")
            for entry in version.get("selectableFields") or []
        }
        types.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                kind=names["kind"],
                plural=names["plural"],
                singular=names.get("singular") or names["kind"].lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=list(names.get("shortNames") or []),
                categories=list(names.get("categories") or []),
                status_subresource="status" in (version.get("subresources") or {}),
                field_selectors=selectable,
                crd=version,
            )
        )
    return types


class Registry:
    """Thread-safe lookup of served kinds by store key and by URL (group, version, plural)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, list[ResourceType]] = {}
        for rt in _builtins():
            self._by_key.setdefault(rt.key, []).append(rt)
        self._by_url: dict[tuple[str, str, str], ResourceType] = {}
        self._reindex()

    def _reindex(self) -> None:
        self._by_url = {
            (rt.group, rt.version, rt.plural): rt for types in self._by_key.values() for rt in types
        }

    def register_crd(self, crd: dict[str, Any]) -> str:
        """Serve (or re-serve after an update) the kind a CRD declares; returns its store key."""
        key = f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"
        types = crd_resource_types(crd)
        with self._lock:
            if types:
                self._by_key[key] = types
            else:
                self._by_key.pop(key, None)
            self._reindex()
        return key

    def serve_versions(self, key: str, versions: Sequence[str], *, status: bool = False) -> None:
        """Serve a built-in kind at `versions` only, the first being the one it is stored in
        (none: the kind is not served), with a status subresource or without."""
        with self._lock:
            known = {rt.version: rt for rt in self._by_key.get(key, [])}
            served = [replace(known[version], status_subresource=status) for version in versions]
            if served:
                self._by_key[key] = served
            else:
                self._by_key.pop(key, None)
            self._reindex()

    def unregister(self, key: str) -> None:
        with self._lock:
            self._by_key.pop(key, None)
            self._reindex()

    def get(self, key: str) -> ResourceType | None:
        """The type of a store key: the version objects are stored in (for CRD kinds the
        storage version's, for built-ins the first served)."""
        with self._lock:
            types = self._by_key.get(key)
        if not types:
            return None
        return next((rt for rt in types if rt.crd and rt.crd.get("storage")), types[0])

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self._lock:
            return self._by_url.get((group, version, plural))

    def all(self) -> list[ResourceType]:
        with self._lock:
            return [rt for types in self._by_key.values() for rt in types]
