"""Discovery documents (legacy and aggregated) and the minimal OpenAPI v3 documents that
kubectl needs."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections import defaultdict
from typing import Any

from simcluster.features import release
from simcluster.resources import STATUS_VERBS, Registry, ResourceType

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"

# Per emulated version: the .0 release's date, and the Go it was built with (unverified;
# clients read gitVersion, major and minor, not these).
_RELEASES = {
    "1.34": ("2025-08-27T00:00:00Z", "go1.24.6"),
    "1.35": ("2025-12-17T00:00:00Z", "go1.25.5"),
    "1.36": ("2026-04-22T00:00:00Z", "go1.26.2"),
}


def git_version(version: str) -> str:
    """The server's gitVersion for an emulated minor version: `v1.36.0-sim`."""
    return f"{release(version)}-sim"


def version_info(version: str) -> dict[str, str]:
    """/version of a server of that minor version, which emulates its own version and is
    compatible back to the minor before, as a real one reports."""
    major, minor = version.split(".")
    build_date, go_version = _RELEASES[version]
    return {
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": str(int(minor) - 1),
        "gitVersion": git_version(version),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": build_date,
        "goVersion": go_version,
        "compiler": "gc",
        "platform": "linux/amd64",
    }


_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Kube-aware ordering: GA before beta before alpha, higher numbers first, then the rest."""
    match = _KUBE_VERSION.match(version)
    if not match:
        return (3, 0, 0, version)
    major, stage, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -int(major), -int(minor or 0), version)


def _groups(registry: Registry) -> dict[str, dict[str, list[ResourceType]]]:
    groups: dict[str, dict[str, list[ResourceType]]] = defaultdict(lambda: defaultdict(list))
    for rtype in registry.all():
        groups[rtype.group][rtype.version].append(rtype)
    return groups


def _sorted_versions(versions: dict[str, list[ResourceType]]) -> list[str]:
    return sorted(versions, key=version_priority)


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = []
    for group, versions in sorted(_groups(registry).items()):
        if not group:
            continue
        ordered = _sorted_versions(versions)
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in ordered]
        groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    for entry in api_group_list(registry)["groups"]:
        if entry["name"] == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **entry}
    return None


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = _groups(registry).get(group, {}).get(version)
    if not types:
        return None
    resources = []
    for rtype in sorted(types, key=lambda r: r.plural):
        entry: dict[str, Any] = {
            "name": rtype.plural,
            "singularName": rtype.singular,
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": rtype.verbs,
        }
        if rtype.short_names:
            entry["shortNames"] = rtype.short_names
        if rtype.categories:
            entry["categories"] = rtype.categories
        resources.append(entry)
        if rtype.status_subresource:
            resources.append(
                {
                    "name": f"{rtype.plural}/status",
                    "singularName": "",
                    "namespaced": rtype.namespaced,
                    "kind": rtype.kind,
                    "verbs": STATUS_VERBS,
                }
            )
        for name, kind, verbs in rtype.subresources:
            resources.append(
                {
                    "name": f"{rtype.plural}/{name}",
                    "singularName": "",
                    "namespaced": rtype.namespaced,
                    "kind": kind,
                    "verbs": list(verbs),
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _discovery_resource(rtype: ResourceType) -> dict[str, Any]:
    kind = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    entry: dict[str, Any] = {
        "resource": rtype.plural,
        "responseKind": kind,
        "scope": "Namespaced" if rtype.namespaced else "Cluster",
        "singularResource": rtype.singular,
        "verbs": rtype.verbs,
    }
    if rtype.short_names:
        entry["shortNames"] = rtype.short_names
    if rtype.categories:
        entry["categories"] = rtype.categories
    subresources = []
    if rtype.status_subresource:
        subresources.append({"subresource": "status", "responseKind": kind, "verbs": STATUS_VERBS})
    for name, sub_kind, verbs in rtype.subresources:
        response = {"group": rtype.group, "version": rtype.version, "kind": sub_kind}
        subresources.append({"subresource": name, "responseKind": response, "verbs": list(verbs)})
    if subresources:
        entry["subresources"] = sorted(subresources, key=lambda s: s["subresource"])
    return entry


def aggregated(registry: Registry, *, core: bool, api_version: str) -> dict[str, Any]:
    """APIGroupDiscoveryList for /api (core only) or /apis (every named group)."""
    items = []
    for group, versions in sorted(_groups(registry).items()):
        if (group == "") != core:
            continue
        items.append(
            {
                "metadata": {"name": group},
                "versions": [
                    {
                        "version": version,
                        "resources": [
                            _discovery_resource(r)
                            for r in sorted(versions[version], key=lambda r: r.plural)
                        ],
                        "freshness": "Current",
                    }
                    for version in _sorted_versions(versions)
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": api_version,
        "metadata": {},
        "items": items,
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3_document(
    registry: Registry, group: str, version: str, *, server_version: str
) -> dict[str, Any] | None:
    """Per group-version document: a PATCH operation per kind, carrying its GVK and the
    fieldValidation parameter, which is what makes kubectl leave validation to the server."""
    types = _groups(registry).get(group, {}).get(version)
    if not types:
        return None
    paths: dict[str, Any] = {}
    for rtype in sorted(types, key=lambda r: r.plural):
        scope = "/namespaces/{namespace}" if rtype.namespaced else ""
        path = f"/{_gv_path(group, version)}{scope}/{rtype.plural}/{{name}}"
        paths[path] = {
            "patch": {
                "x-kubernetes-group-version-kind": {
                    "group": group,
                    "version": version,
                    "kind": rtype.kind,
                },
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": git_version(server_version)},
        "paths": paths,
        "components": {"schemas": _crd_schemas(types)},
    }


def _crd_schemas(types: list[ResourceType]) -> dict[str, Any]:
    """Each CRD kind's structural schema, named and tagged as the API server publishes it
    (`io.lokiwager.runtime.v1alpha1.GPUUnit`, `x-kubernetes-group-version-kind`): what
    `kubectl explain` reads. Built-in kinds carry no schema here, so explain knows only CRDs."""
    schemas: dict[str, Any] = {}
    for rtype in types:
        schema = ((rtype.crd or {}).get("schema") or {}).get("openAPIV3Schema")
        if not schema:
            continue
        name = ".".join([*reversed(rtype.group.split(".")), rtype.version, rtype.kind])
        schemas[name] = {
            **copy.deepcopy(schema),
            "x-kubernetes-group-version-kind": [
                {"group": rtype.group, "kind": rtype.kind, "version": rtype.version}
            ],
        }
    return schemas


def _hash(document: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:32].upper()


def openapi_v3_root(registry: Registry, *, server_version: str) -> dict[str, Any]:
    paths = {}
    for group, versions in sorted(_groups(registry).items()):
        for version in versions:
            document = openapi_v3_document(registry, group, version, server_version=server_version)
            if document is not None:
                gv = _gv_path(group, version)
                paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={_hash(document)}"}
    return {"paths": paths}
