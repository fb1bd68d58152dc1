"""`manage.py import_clusters FILE... [--region R] [--enable] [--dry-run]`: register clusters
from multicluster ClusterProfile objects (KEP-4322), all or nothing."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from controlplane.validation import dns_label, file_name
from inventory.models import Cluster

API_VERSION = "multicluster.x-k8s.io/v1alpha1"
KIND = "ClusterProfile"
LIST_KINDS = ("List", f"{KIND}List")
# Cluster managers spell the region differently; the first one present wins.
REGION_PROPERTIES = ("region", "topology.kubernetes.io/region", "location")
REGION_LABEL = "topology.kubernetes.io/region"
KUBECONFIG_ANNOTATION = "gpu.lokiwager.io/kubeconfig"
KUBECONFIG_FILE = "kubeconfig-{name}"
CIDR_PROPERTIES = {
    "pod_cidrs": "pod-cidrs",
    "service_cidrs": "service-cidrs",
    "node_cidrs": "node-cidrs",
}


class ProfileError(ValueError):
    """One object cannot become a cluster row; the others are still checked."""


@dataclass(frozen=True)
class Profile:
    """A ClusterProfile as the Cluster fields it sets (kubeconfig only when one was given)."""

    name: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Source:
    """One object of the input and where it came from, to name it when it has no name."""

    where: str
    index: int
    body: Any

    @property
    def label(self) -> str:
        metadata = self.body.get("metadata") if isinstance(self.body, dict) else None
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if isinstance(name, str) and name:
            return name
        return f"{self.where}[{self.index}]"


def split_objects(where: str, text: str) -> list[Source]:
    """The objects of a YAML stream: documents, with Lists (kubectl get -o yaml) unwrapped."""
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        raise CommandError(f"{where}: not valid YAML: {error}") from error
    bodies: list[Any] = []
    for document in documents:
        if isinstance(document, dict) and document.get("kind") in LIST_KINDS:
            items = document.get("items") or []
            bodies.extend(items if isinstance(items, list) else [items])
        elif document is not None:
            bodies.append(document)
    return [Source(where, index, body) for index, body in enumerate(bodies, 1)]


def _mapping(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProfileError(f"{key} is not a mapping")
    return value


def _properties(status: dict[str, Any]) -> dict[str, str]:
    listed = status.get("properties") or []
    if not isinstance(listed, list):
        raise ProfileError("status.properties is not a list")
    properties: dict[str, str] = {}
    for index, item in enumerate(listed):
        where = f"status.properties[{index}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ProfileError(f"{where} is not a {{name, value}} mapping")
        name, value = item["name"], item.get("value")
        if not isinstance(value, str):
            raise ProfileError(f"{where} ({name}): the value is not a string")
        if name in properties:
            raise ProfileError(f"{where}: property {name} is listed twice")
        properties[name] = value
    return properties


def _kubeconfig(name: str, annotations: dict[str, Any]) -> str:
    """The kubeconfig file name of cluster `name` in CLUSTER_CREDENTIALS_DIR: the annotation's,
    else kubeconfig-<name> when this process's directory has it, else "" (none yet)."""
    annotated = annotations.get(KUBECONFIG_ANNOTATION)
    if annotated is not None:
        if not isinstance(annotated, str) or file_name(annotated):
            # A profile names a file of the directory each process mounts, never a path.
            raise ProfileError(
                f"annotation {KUBECONFIG_ANNOTATION}: {annotated!r} is not a file name in "
                "CLUSTER_CREDENTIALS_DIR"
            )
        return annotated
    candidate = KUBECONFIG_FILE.format(name=name)
    if (Path(settings.CLUSTER_CREDENTIALS_DIR) / candidate).is_file():
        return candidate
    return ""


def read_profile(body: Any, *, region: str) -> Profile:
    """The Cluster fields a ClusterProfile sets; `region` is the fallback (may be "")."""
    if not isinstance(body, dict):
        raise ProfileError("not a Kubernetes object (a mapping with apiVersion and kind)")
    kind, api_version = body.get("kind"), body.get("apiVersion")
    if (kind, api_version) != (KIND, API_VERSION):
        raise ProfileError(f"kind {kind} ({api_version}) is not a {KIND} ({API_VERSION})")
    metadata = _mapping(body, "metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or (problem := dns_label(name)):
        raise ProfileError(
            f"metadata.name: {problem if isinstance(name, str) else 'This field is required.'} "
            "Units record the cluster's name, so it must be a DNS label."
        )
    spec = _mapping(body, "spec")
    display_name = spec.get("displayName") or ""
    if not isinstance(display_name, str):
        raise ProfileError("spec.displayName is not a string")
    properties = _properties(_mapping(body, "status"))
    labels = _mapping(metadata, "labels")
    found = next((properties[p] for p in REGION_PROPERTIES if p in properties), None)
    found = found or labels.get(REGION_LABEL) or region
    if not found:
        raise ProfileError(
            f"no region: none of the properties {', '.join(REGION_PROPERTIES)}, no label "
            f"{REGION_LABEL}, and no --region"
        )
    fields: dict[str, Any] = {
        "display_name": display_name,
        "region": found,
        "properties": properties,
    }
    for field, prop in CIDR_PROPERTIES.items():
        ranges = properties.get(prop, "")
        fields[field] = [cidr.strip() for cidr in ranges.split(",") if cidr.strip()]
    if kubeconfig := _kubeconfig(name, _mapping(metadata, "annotations")):
        fields["kubeconfig"] = kubeconfig
    return Profile(name=name, fields=fields)


def _describe(error: ValidationError) -> str:
    by_field = error.message_dict if hasattr(error, "error_dict") else {"": error.messages}
    return "; ".join(
        f"{field}: {' '.join(messages)}" if field and field != "__all__" else " ".join(messages)
        for field, messages in by_field.items()
    )


@dataclass(frozen=True)
class Change:
    """What importing one profile does to its row: `changed` is empty when nothing does."""

    cluster: Cluster
    created: bool
    changed: list[str]

    @property
    def line(self) -> str:
        if self.created:
            return f"created {self.cluster.name} (region {self.cluster.region})"
        if self.changed:
            return f"updated {self.cluster.name} ({', '.join(self.changed)})"
        return f"unchanged {self.cluster.name}"


def plan_change(profile: Profile, current: Cluster | None, *, enable: bool) -> Change:
    """The row after the import, validated (not saved). An existing row keeps its enabled,
    cordoned and position: those are operations' decisions, not the profile's."""
    if current is None:
        change = Change(Cluster(name=profile.name, enabled=enable, **profile.fields), True, [])
    else:
        if enable and not current.enabled:
            raise ProfileError(
                "--enable: the cluster exists and is disabled, and an import keeps an existing "
                "cluster's enabled, cordoned and position; enable it in the admin"
            )
        changed = [f for f, value in profile.fields.items() if getattr(current, f) != value]
        for field in changed:
            setattr(current, field, profile.fields[field])
        change = Change(current, False, changed)
    try:
        change.cluster.full_clean()
    except ValidationError as error:
        raise ProfileError(_describe(error)) from None
    return change


class Command(BaseCommand):
    help = (
        f"Register clusters from {KIND} objects ({API_VERSION}, the SIG-Multicluster cluster "
        "inventory API): a List, several YAML documents or one object, all or nothing. "
        "metadata.name is the cluster's name, spec.displayName its display name, and the "
        f"region the first of the properties {', '.join(REGION_PROPERTIES)}, else the label "
        f"{REGION_LABEL}, else --region. A cluster the import creates starts disabled (an "
        "operator enables it in the admin once its kubeconfig is in place), or enabled with "
        "--enable for a single new cluster: enabled, it is observed, synced and reconciled "
        "and takes units. An existing cluster keeps its enabled, cordoned and position."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", metavar="FILE", help="YAML file ('-' = stdin)")
        parser.add_argument(
            "--region", default="", help="region of profiles that name none (a DNS label)"
        )
        parser.add_argument(
            "--enable",
            action="store_true",
            help="enable the new cluster (one profile only): it is observed and takes units",
        )
        parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")

    def handle(
        self,
        *args: Any,
        files: list[str],
        region: str,
        enable: bool,
        dry_run: bool,
        **options: Any,
    ) -> None:
        if region and (problem := dns_label(region)):
            raise CommandError(f"--region: {problem}")
        sources = [source for file in files for source in split_objects(file, self._read(file))]
        if not sources:
            raise CommandError(f"no {KIND} in {', '.join(files)}")
        if enable and len(sources) != 1:
            raise CommandError(f"--enable takes one {KIND}; the input has {len(sources)}")

        lines: list[str] = []
        changes: list[Change] = []
        with transaction.atomic():
            # Lock the registry so two imports (or an admin edit) cannot interleave with the plan.
            current = {c.name: c for c in Cluster.objects.select_for_update()}
            seen: set[str] = set()
            for source in sources:
                try:
                    profile = read_profile(source.body, region=region)
                    if profile.name in seen:
                        raise ProfileError("the input names this cluster twice")
                    seen.add(profile.name)
                    change = plan_change(profile, current.get(profile.name), enable=enable)
                except ProfileError as error:
                    lines.append(f"error {source.label}: {error}")
                    continue
                changes.append(change)
                lines.append(change.line)
            for line in lines:
                self.stdout.write(line)
            errors = len(sources) - len(changes)
            if errors:
                raise CommandError(
                    f"{errors} of {len(sources)} objects had errors; nothing written"
                )
            if not dry_run:
                for change in changes:
                    if change.created:
                        change.cluster.save(force_insert=True)
                    elif change.changed:
                        change.cluster.save(update_fields=change.changed)
        created = sum(c.created for c in changes)
        updated = sum(bool(c.changed) for c in changes)
        summary = (
            f"{created} created, {updated} updated, {len(changes) - created - updated} unchanged"
        )
        suffix = " (dry run: nothing written)" if dry_run else ""
        self.stdout.write(self.style.SUCCESS(summary + suffix))

    def _read(self, file: str) -> str:
        if file == "-":
            return sys.stdin.read()
        path = Path(file)
        if not path.is_file():
            raise CommandError(f"{file}: no such file")
        return path.read_text(encoding="utf-8")
