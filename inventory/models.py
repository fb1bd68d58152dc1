"""The Postgres mirror of each cluster's observed DRA state, rewritten by its inventory sync.

Rows are keyed by their cluster and their Kubernetes identity; a cluster's sync upserts what
changed there and deletes what disappeared, so each cluster's rows always equal its last
successful observation."""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from controlplane.validation import validate_cidr, validate_dns_label, validate_file_name


def own_cluster() -> str:
    """The mirror's rows are the process's own cluster's unless a sync says otherwise."""
    return settings.CLUSTER_NAME


class Mirrored(models.Model):
    """A row of one cluster's mirror: the `Cluster` it was observed in, by name (the mirror is
    derived data; a cluster's rows go when its sync no longer sees them)."""

    cluster = models.CharField(max_length=63, default=own_cluster)

    class Meta:
        abstract = True


class Node(Mirrored):
    name = models.CharField(max_length=253)
    ready = models.BooleanField(default=False)
    labels = models.JSONField(default=dict, blank=True)
    cpu_allocatable_millicores = models.BigIntegerField(default=0)
    memory_allocatable_bytes = models.BigIntegerField(default=0)
    cpu_requested_millicores = models.BigIntegerField(default=0)
    memory_requested_bytes = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="node_identity")]

    def __str__(self) -> str:
        return self.name

    @property
    def cpu_free_millicores(self) -> int:
        return max(0, self.cpu_allocatable_millicores - self.cpu_requested_millicores)

    @property
    def memory_free_bytes(self) -> int:
        return max(0, self.memory_allocatable_bytes - self.memory_requested_bytes)


class DeviceClass(Mirrored):
    name = models.CharField(max_length=253)
    selectors = models.JSONField(default=list, blank=True, help_text="CEL expressions, ANDed")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="device_class_identity")
        ]
        verbose_name_plural = "device classes"

    def __str__(self) -> str:
        return self.name


class DevicePool(Mirrored):
    """A driver's pool: only its latest generation counts; complete when all slices are seen."""

    driver = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    node_name = models.CharField(max_length=253, blank=True)
    generation = models.BigIntegerField()
    slice_count = models.PositiveIntegerField(help_text="resourceSliceCount the driver announced")
    slices_seen = models.PositiveIntegerField(help_text="slices of this generation observed")
    complete = models.BooleanField()
    counter_sets = models.JSONField(
        default=list,
        blank=True,
        help_text="[{name, counters: {<counter>: {total, remaining}}}]: the pool's sharedCounters "
        "and what is left of them after the devices allocated claims hold (partitionable devices)",
    )

    class Meta:
        ordering = ["driver", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "driver", "name"], name="pool_identity"),
        ]

    def __str__(self) -> str:
        return f"{self.driver}/{self.name}"


class Device(Mirrored):
    """One device of a pool's latest generation, with the classes and packages it can serve."""

    driver = models.CharField(max_length=253)
    pool = models.CharField(max_length=253)
    name = models.CharField(max_length=63)
    node_name = models.CharField(max_length=253, blank=True)
    pool_complete = models.BooleanField(help_text="counted in totals only when complete")
    product = models.CharField(max_length=253, blank=True)
    attributes = models.JSONField(default=dict)
    capacity = models.JSONField(default=dict)
    consumes_counters = models.JSONField(
        default=list,
        blank=True,
        help_text="consumesCounters as published: [{counterSet, counters: {<counter>: {value}}}], "
        "what the device draws from its pool's counter sets when allocated",
    )
    device_classes = ArrayField(models.CharField(max_length=253), default=list, blank=True)
    packages = ArrayField(
        models.CharField(max_length=63),
        default=list,
        blank=True,
        help_text="active packages whose class and selectors this device satisfies",
    )
    content_hash = models.CharField(
        max_length=64, help_text="what class/package membership was computed from"
    )
    allocated = models.BooleanField(default=False)
    claim_namespace = models.CharField(max_length=63, blank=True)
    claim_name = models.CharField(max_length=253, blank=True)
    taints = models.JSONField(
        default=list,
        blank=True,
        help_text="[{key, value, effect, timeAdded, source}]: the slice's own taints, then those "
        "of matching DeviceTaintRules; source names the object (ResourceSlice/<name> or "
        "DeviceTaintRule/<name>)",
    )
    tainted = models.BooleanField(
        default=False,
        help_text="has a NoSchedule or NoExecute taint: the scheduler gives it to no claim that "
        "does not tolerate it, so it is never counted free",
    )

    class Meta:
        ordering = ["driver", "pool", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "driver", "pool", "name"], name="device_identity"
            ),
        ]
        indexes = [models.Index(fields=["cluster", "node_name"], name="device_node")]

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"


class Claim(Mirrored):
    """A ResourceClaim and its allocation (every claim in the cluster, not only ours)."""

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64)
    allocated = models.BooleanField()
    node_name = models.CharField(max_length=253, blank=True)
    results = models.JSONField(default=list, help_text="status.allocation.devices.results")
    reserved_for = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="claim_identity")
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Quota(Mirrored):
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    hard = models.JSONField(default=dict)
    used = models.JSONField(default=dict)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="quota_identity")
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class PackageAvailability(Mirrored):
    """How many units of a package a cluster could place at its last sync."""

    package_id = models.CharField(max_length=63)
    placeable = models.PositiveIntegerField(help_text="units that fit, node by node")
    free_devices = models.PositiveIntegerField(help_text="free devices the package could use")
    reason = models.CharField(max_length=200, blank=True, help_text="why nothing fits")

    class Meta:
        ordering = ["package_id"]
        verbose_name_plural = "package availability"
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "package_id"], name="package_availability_identity"
            )
        ]

    def __str__(self) -> str:
        return f"{self.package_id}: {self.placeable}"


class InventorySnapshot(Mirrored):
    """A cluster's operator inventory document as of its last successful sync, stored rendered
    so serving it costs the same at 10 and 10,000 devices. One row per cluster."""

    as_of = models.DateTimeField()
    document = models.TextField(help_text="JSON object of the inventory fields")

    class Meta:
        verbose_name = "inventory snapshot"
        constraints = [models.UniqueConstraint(fields=["cluster"], name="snapshot_per_cluster")]

    def __str__(self) -> str:
        return f"inventory as of {self.as_of:%Y-%m-%d %H:%M:%S}"


class SyncRun(Mirrored):
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    counts = models.JSONField(default=dict, blank=True)
    allocated_devices = models.PositiveIntegerField(
        null=True, blank=True, help_text="for the utilisation chart"
    )
    total_devices = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["cluster", "-started_at"], name="sync_recent")]

    def __str__(self) -> str:
        return f"sync {self.started_at:%Y-%m-%d %H:%M:%S} {'failed' if self.error else 'ok'}"

    @property
    def ok(self) -> bool:
        return self.finished_at is not None and not self.error


class Cluster(models.Model):
    """A Kubernetes cluster units are placed in (ARCHITECTURE §20), shaped after the
    multicluster ClusterProfile API (multicluster.x-k8s.io/v1alpha1: its name, displayName,
    and the region among its properties; `manage.py import_clusters` reads them).

    Each enabled cluster has its own observer, inventory sync, backstop reconcile and Celery
    queue; the process's own cluster (CLUSTER_NAME) is reached through KUBECONFIG or the
    service account unless its row names a kubeconfig. A row names a file, never a path: which
    credentials a process holds is its deployment's choice (a mounted Secret per ServiceAccount),
    not a row's, so staff and imported profiles cannot point a process at any file it can read."""

    name = models.CharField(
        max_length=63,
        unique=True,
        validators=[validate_dns_label],
        help_text="a DNS label; units record it, so it is never renamed",
    )
    display_name = models.CharField(max_length=200, blank=True)
    region = models.CharField(
        max_length=63, validators=[validate_dns_label], help_text="a DNS label, e.g. us-east"
    )
    enabled = models.BooleanField(default=True, help_text="off: not reached at all")
    cordoned = models.BooleanField(
        default=False, help_text="no new placements; what runs there keeps running"
    )
    position = models.PositiveIntegerField(
        default=100,
        help_text="placement order among clusters with as many free devices (low first)",
    )
    kubeconfig = models.CharField(
        max_length=253,
        blank=True,
        validators=[validate_file_name],
        help_text="file name of its kubeconfig in each process's CLUSTER_CREDENTIALS_DIR (each "
        "process mounts its own, with its own ServiceAccount's token), e.g. kubeconfig-eu-west; "
        "empty: KUBECONFIG, or the service account when the control plane runs in this cluster",
    )
    kube_context = models.CharField(max_length=253, blank=True, help_text="context in it")
    pod_cidrs = ArrayField(
        models.CharField(max_length=49, validators=[validate_cidr]), default=list, blank=True
    )
    service_cidrs = ArrayField(
        models.CharField(max_length=49, validators=[validate_cidr]), default=list, blank=True
    )
    node_cidrs = ArrayField(
        models.CharField(max_length=49, validators=[validate_cidr]), default=list, blank=True
    )
    properties = models.JSONField(
        default=dict, blank=True, help_text="a ClusterProfile's status.properties, as imported"
    )

    class Meta:
        ordering = ["position", "name"]

    def __str__(self) -> str:
        return self.name
