"""GPU units, the operations that change them, and unit timelines."""

from __future__ import annotations

import enum
import hashlib
import uuid
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from catalog.models import DEFAULT_TERMINATION_GRACE_SECONDS, Package
from runtime import manifests
from tenancy.models import Tenant


class UnitPhase(models.TextChoices):
    ACCEPTED = "Accepted"
    PROVISIONING = "Provisioning"
    PENDING = "Pending"
    RUNNING = "Running"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    # An interruptible unit whose devices were taken back (ARCHITECTURE §22): stopped by the
    # control plane, restartable with start as a stopped one is.
    PREEMPTED = "Preempted"
    TERMINATING = "Terminating"
    TERMINATED = "Terminated"

    # A unit keeps its name and its claim's share of the tenant quota until it is Terminated
    # (a Stopped unit gives back its CPU and memory: GPUUnit.compute_charged).
    LIVE = enum.nonmember(
        frozenset(
            {
                "Accepted",
                "Provisioning",
                "Pending",
                "Running",
                "Failed",
                "Stopping",
                "Stopped",
                "Preempted",
                "Terminating",
            }
        )
    )
    # No pod, by a stop: the customer's or the control plane's (a preemption).
    AT_REST = enum.nonmember(frozenset({"Stopped", "Preempted"}))
    # The unit is going or gone: no action, update or order applies to it any more.
    ENDING = enum.nonmember(frozenset({"Terminating", "Terminated"}))
    # Phases reconcile_units derives from the cluster; the others are driven by requests.
    OBSERVED = enum.nonmember(frozenset({"Provisioning", "Pending", "Running", "Failed"}))


class RunPolicy(models.TextChoices):
    """Whether the unit should have a pod (GPUUnit spec.runPolicy): stop and start set it."""

    RUNNING = "Running"
    STOPPED = "Stopped"


class UnitQuerySet(models.QuerySet["GPUUnit"]):
    def live(self) -> UnitQuerySet:
        """Units that are not Terminated: they keep their name, claim and quota (UnitPhase.LIVE)."""
        return self.filter(phase__in=UnitPhase.LIVE)


class GPUUnit(models.Model):
    """A customer's GPU unit: a snapshot of the package contract plus its observed state."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # Indexed by unit_tenant_recent and unit_name_unique_while_live, which lead with it.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="units", db_index=False
    )
    name = models.CharField(max_length=54)
    namespace = models.CharField(max_length=63)
    operation_id = models.CharField("operation ID", max_length=128)
    # Where placement put it, once and for all (inventory.placement): its objects live there.
    cluster = models.CharField(max_length=63, help_text="the cluster the unit was placed in")
    region = models.CharField(max_length=63, help_text="the cluster's region, when placed")
    # Clusters of its region that refused to make it before anything of it existed there
    # (orders.place_again): it was placed again elsewhere, never back in one of these.
    clusters_refused = ArrayField(models.CharField(max_length=63), default=list, blank=True)
    # The package contract as it was when the unit was ordered.
    package_id = models.CharField("package ID", max_length=63)
    spec_name = models.CharField(max_length=253)
    cpu = models.CharField(max_length=32)
    memory = models.CharField(max_length=32)
    cpu_millicores = models.BigIntegerField(help_text="cpu as a number, for quota sums")
    memory_bytes = models.BigIntegerField(help_text="memory as a number, for quota sums")
    ephemeral_storage = models.CharField(
        max_length=32,
        blank=True,
        default="",
        help_text="the pod's ephemeral-storage request and limit (blank on units ordered "
        "before packages had one: none)",
    )
    termination_grace_seconds = models.PositiveIntegerField(
        default=DEFAULT_TERMINATION_GRACE_SECONDS,
        help_text="the pod's terminationGracePeriodSeconds: how long its containers get after "
        "SIGTERM (30, Kubernetes' default, on units ordered before packages had one)",
    )
    gpu = models.PositiveIntegerField()
    interruptible = models.BooleanField(
        default=False,
        help_text="ordered as interruptible: billed at the package's interruptible price, on "
        "free capacity, and taken back with notice when an on-demand unit needs its devices",
    )
    auto_resume = models.BooleanField(
        default=False,
        help_text="an interruptible unit started again by the control plane once it was "
        "preempted and its package fits its cluster again",
    )
    preemption_wait_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="an on-demand unit for which interruptible units give way: their devices "
        "are free after this (and their grace); while it is Pending its reason says so",
    )
    preemption = models.JSONField(
        default=dict,
        blank=True,
        help_text="an interruptible unit told its devices are taken back: {reason, noticeAt, "
        "preemptAt, for (the waiting unit's uid)}; {} otherwise (cleared by a start)",
    )
    reservation = models.ForeignKey(
        "Reservation",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="units",
        help_text="ordered on this reservation's held devices",
    )
    reservation_slot = models.PositiveIntegerField(
        null=True, blank=True, help_text="the reservation's slot (placeholder) it took"
    )
    handover = models.JSONField(
        default=dict,
        blank=True,
        help_text="devices being handed over to this unit (the preempted units' or its "
        "reservation's): {value, devices [{driver, pool, device}], selector, at}. They carry "
        "a NoSchedule taint only its claim tolerates, and its claim asks for them by "
        "selector; {} once it holds them (or gave up waiting)",
    )
    device_class_name = models.CharField(max_length=253)
    claim_name = models.CharField(max_length=63)
    claim_request_name = models.CharField(max_length=63)
    count = models.PositiveIntegerField()
    selectors = models.JSONField(default=list, blank=True)
    capacity = models.JSONField(default=dict, blank=True)
    # The package's fallbacks ([{name, deviceClassName, count, selectors?, capacity?}]).
    alternatives = models.JSONField(default=list, blank=True)
    match_attribute = models.CharField(max_length=316, blank=True)
    image = models.CharField(max_length=512)
    template = models.JSONField(default=dict, blank=True)
    # {primaryPort, scheme} when the template has ports (validation.access), else {}.
    access = models.JSONField(default=dict, blank=True)
    # [{name, mountPath, readOnly}]: the tenant's storages the pod mounts (validation).
    storage_mounts = models.JSONField(default=list, blank=True)
    # {"enabled": true, "keys": [names of the tenant's SSH keys]} or {}: the public keys
    # themselves go to the unit's ConfigMap, never its spec.
    ssh = models.JSONField(default=dict, blank=True)
    # The DNS label of its public hostname (access.host_label), fixed when it is ordered so
    # no live unit can be given another's URL (unit_host_label_unique_while_live). Blank only
    # on rows not written by an order: access computes theirs.
    host_label = models.CharField(max_length=63, blank=True)
    # What the customer wants of it now. `generation` counts changes to the spec (update, stop,
    # start), as a Kubernetes object's metadata.generation does; `observed_generation` is the
    # one the cluster's objects were last brought to.
    run_policy = models.CharField(max_length=8, choices=RunPolicy, default=RunPolicy.RUNNING)
    generation = models.PositiveIntegerField(default=1)
    observed_generation = models.PositiveIntegerField(default=0)
    # Auto-stop: the unit stops `stop_after` (a duration, "8h") after it last started.
    stop_after = models.CharField(max_length=16, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # The last restart (the pod carries it, so a restart is a change its template shows).
    restarted_at = models.DateTimeField(null=True, blank=True)
    stops_at = models.DateTimeField(null=True, blank=True)
    # Since when its pod holds allocated devices without any container having started (an
    # image that does not pull, a container that cannot be created): beat stops the unit
    # START_DEADLINE_SECONDS later (nothing holds devices for free for long).
    idle_hold_since = models.DateTimeField(null=True, blank=True)
    # Whether the unit's CPU and memory are charged to the tenant's usage counters (false
    # once Stopped or Terminated; a start charges them again).
    compute_charged = models.BooleanField(default=True)
    # Observed state.
    phase = models.CharField(max_length=16, choices=UnitPhase, default=UnitPhase.ACCEPTED)
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    dra = models.JSONField(default=dict, blank=True)
    # What provisioning saw of the unit's Service: {"nodePorts": {port name: n}, "loadBalancer"}.
    exposed = models.JSONField(default=dict, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    unit_k8s_uid = models.CharField("GPUUnit UID", max_length=64, blank=True)
    claim_k8s_uid = models.CharField("ResourceClaim UID", max_length=64, blank=True)
    pod_k8s_uid = models.CharField("Pod UID", max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    terminated_at = models.DateTimeField(null=True, blank=True)
    # What the unit has cost so far: not stored, set by the views that render it
    # (runtime.api.views.with_costs, from the usage ledger).
    cost_to_date: Decimal

    objects = UnitQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        verbose_name = "GPU unit"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=~Q(phase="Terminated"),
                name="unit_name_unique_while_live",
                violation_error_message="A live unit with this name already exists.",
            ),
            models.UniqueConstraint(
                fields=["host_label"],
                condition=~Q(phase="Terminated") & ~Q(host_label=""),
                name="unit_host_label_unique_while_live",
                violation_error_message="A live unit already has this host label.",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "-id"], name="unit_tenant_recent"),
            models.Index(fields=["phase"], name="unit_phase"),
            models.Index(
                fields=["stops_at"], name="unit_stops_at", condition=Q(stops_at__isnull=False)
            ),
            models.Index(
                fields=["idle_hold_since"],
                name="unit_idle_hold_since",
                condition=Q(idle_hold_since__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def etag(self) -> str:
        """The HTTP entity tag of the unit's spec as of its generation (If-Match takes it)."""
        digest = hashlib.sha256(f"{self.uid}:{self.generation}".encode()).hexdigest()
        return f'"{self.generation}-{digest[:16]}"'

    @property
    def at_rest(self) -> bool:
        """Stopped or Preempted: no pod, by a stop (the customer's or the control plane's)."""
        return self.phase in UnitPhase.AT_REST

    @property
    def rolling_out(self) -> bool:
        """A stop, start, restart or update is being carried out: its worker moves the unit's
        pod and phase, so the reconcile leaves both alone until it has recorded the rollout
        (the cluster has not caught up with the spec's generation, or the pod is going)."""
        return self.observed_generation < self.generation or self.phase == UnitPhase.STOPPING

    @staticmethod
    def contract_fields(package: Package, *, name: str) -> dict[str, Any]:
        """The package contract a new unit named `name` snapshots: these fields never change
        afterwards, whatever becomes of the package."""
        claim_name = manifests.claim_name_for(name)
        return {
            "package_id": package.id,
            "spec_name": package.spec_name,
            "cpu": package.cpu,
            "memory": package.memory,
            "cpu_millicores": package.cpu_millicores,
            "memory_bytes": package.memory_bytes,
            "ephemeral_storage": package.unit_ephemeral_storage,
            "termination_grace_seconds": package.termination_grace_seconds,
            "gpu": package.gpu,
            "device_class_name": package.device_class_name,
            "claim_name": claim_name,
            "claim_request_name": package.claim_request_name,
            "count": package.count,
            "selectors": list(package.selectors),
            "capacity": dict(package.capacity),
            "alternatives": [dict(alternative) for alternative in package.alternatives or []],
            "match_attribute": package.match_attribute,
            "dra": {"claimName": claim_name, "allocated": False, "devices": []},
        }

    def contract(self, *, request_hash: str) -> manifests.UnitContract:
        """What the manifest builders need to know about this unit (its tenant loaded)."""
        template = self.template or {}
        return manifests.UnitContract(
            name=self.name,
            namespace=self.namespace,
            tenant=self.tenant.slug,
            operation_id=self.operation_id,
            request_hash=request_hash,
            package_id=self.package_id,
            spec_name=self.spec_name,
            image=self.image,
            cpu=self.cpu,
            memory=self.memory,
            gpu=self.gpu,
            device_class_name=self.device_class_name,
            claim_name=self.claim_name,
            claim_request_name=self.claim_request_name,
            count=self.count,
            selectors=list(self.selectors or []),
            capacity=dict(self.capacity or {}),
            alternatives=[dict(alternative) for alternative in self.alternatives or []],
            match_attribute=self.match_attribute,
            command=list(template.get("command") or []),
            args=list(template.get("args") or []),
            env=list(template.get("env") or []),
            ports=list(template.get("ports") or []),
            access=dict(self.access or {}),
            storage_mounts=list(self.storage_mounts or []),
            memory_bytes=self.memory_bytes,
            ephemeral_storage=self.ephemeral_storage,
            termination_grace_seconds=self.termination_grace_seconds,
            ssh=bool((self.ssh or {}).get("enabled")),
            run_policy=self.run_policy,
            stop_after=self.stop_after,
            restarted_at=(
                self.restarted_at.strftime("%Y-%m-%dT%H:%M:%SZ") if self.restarted_at else ""
            ),
            ssh_image=settings.SSH_SERVER_IMAGE,
            host_label=self.host_label,
            handover=manifests.Handover.of(self.handover),
        )


class StorageAccessMode(models.TextChoices):
    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_WRITE_MANY = "ReadWriteMany"
    READ_ONLY_MANY = "ReadOnlyMany"
    READ_WRITE_ONCE_POD = "ReadWriteOncePod"


class StoragePhase(models.TextChoices):
    PENDING = "Pending"  # recorded; the claim is being created, or waits for a volume
    BOUND = "Bound"
    FAILED = "Failed"  # the cluster refused the claim (message says why)
    LOST = "Lost"  # the claim went missing (beat's reconcile creates it again)
    TERMINATING = "Terminating"  # deletion requested; the row goes once the claim is gone


def home_cluster() -> str:
    """The process's own cluster (CLUSTER_NAME): where a storage lives unless placed."""
    return settings.CLUSTER_NAME


def home_region() -> str:
    return settings.CLUSTER_REGION


class GPUStorage(models.Model):
    """A tenant's persistent volume (the seed runtime's GPUStorage): the PersistentVolumeClaim
    `storage-<name>` in its namespace of one cluster, mounted by units through
    `storageMounts` (so placed in that cluster), outliving them. `phase` is the claim's as
    last seen."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="storages")
    name = models.CharField(max_length=55, help_text="DNS label; the claim is storage-<name>.")
    size = models.CharField(max_length=32, help_text='Kubernetes quantity, e.g. "100Gi".')
    size_bytes = models.BigIntegerField()
    storage_class = models.CharField(max_length=253, blank=True, help_text="Empty: the default.")
    access_mode = models.CharField(
        max_length=16, choices=StorageAccessMode, default=StorageAccessMode.READ_WRITE_ONCE
    )
    cluster = models.CharField(
        max_length=63,
        default=home_cluster,
        help_text="the cluster its claim lives in: units that mount it run there",
    )
    region = models.CharField(max_length=63, default=home_region, help_text="its region")
    phase = models.CharField(max_length=16, choices=StoragePhase, default=StoragePhase.PENDING)
    message = models.TextField(blank=True)
    claim_k8s_uid = models.CharField("PVC UID", max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU storage"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="storage_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.namespace}/{self.name}"

    @property
    def claim_name(self) -> str:
        return f"storage-{self.name}"

    @property
    def exclusive(self) -> bool:
        """Mounted by at most one live unit (a ReadWriteOnce volume is one node's)."""
        return self.access_mode in (
            StorageAccessMode.READ_WRITE_ONCE,
            StorageAccessMode.READ_WRITE_ONCE_POD,
        )


class ReservationStatus(models.TextChoices):
    SCHEDULED = "Scheduled"  # before its start: nothing held yet
    ACTIVE = "Active"  # its window: placeholders hold what its units do not use
    ENDED = "Ended"
    CANCELLED = "Cancelled"  # before its start: never held, never billed


class ReservationEnd(models.TextChoices):
    KEEP = "keep"  # its units run on, billed on demand
    STOP = "stop"  # its units are stopped at its end


class Reservation(models.Model):
    """Devices held for a tenant ahead of time (ARCHITECTURE §22): `count` units' worth of a
    package in one cluster from `start` to `end`. In its window, placeholder claims held by
    minimal pods in the tenant's namespace (`reservation-<name>-<slot>`) take what its units
    do not use, so no other tenant is allocated it; a unit ordered with `reservation` takes a
    slot, and the placeholder's devices are handed over to it (runtime/control/handover.py)."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="reservations")
    name = models.CharField(max_length=40, help_text="DNS label, unique per tenant")
    package = models.ForeignKey(Package, on_delete=models.PROTECT, related_name="reservations")
    count = models.PositiveIntegerField(help_text="units' worth of the package held")
    start = models.DateTimeField()
    end = models.DateTimeField()
    at_end = models.CharField(
        max_length=8,
        choices=ReservationEnd,
        default=ReservationEnd.KEEP,
        help_text="what becomes of its units at its end: they keep running (on demand), or stop",
    )
    cluster = models.CharField(max_length=63, help_text="where its devices are held")
    region = models.CharField(max_length=63)
    status = models.CharField(
        max_length=16, choices=ReservationStatus, default=ReservationStatus.SCHEDULED
    )
    held = models.PositiveIntegerField(
        default=0, help_text="slots whose devices are held (by a placeholder or a unit), as seen"
    )
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["start", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="reservation_unique_name"),
            models.CheckConstraint(
                condition=models.Q(end__gt=models.F("start")), name="reservation_window"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.namespace}/{self.name}"

    @property
    def devices(self) -> int:
        """Devices it holds in its window (the package's per unit, `count` times)."""
        return self.count * self.package.count

    def placeholder_name(self, slot: int) -> str:
        return f"reservation-{self.name}-{slot}"


class OperationKind(models.TextChoices):
    CREATE = "create"
    DELETE = "delete"
    STOP = "stop"
    START = "start"
    RESTART = "restart"
    UPDATE = "update"


class OperationStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    OPEN = enum.nonmember(frozenset({"pending", "running"}))


class Operation(models.Model):
    """A change a customer (or the control plane: deletions, auto-stops) asked for. It is the
    outbox: the sweeper re-enqueues open ones. A unit has at most one open operation but for
    the deletion, which cancels the others."""

    # Indexed by operation_id_unique_per_tenant, which leads with it.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="operations", db_index=False
    )
    operation_id = models.CharField("operation ID", max_length=128)
    kind = models.CharField(max_length=8, choices=OperationKind)
    request_hash = models.CharField(max_length=64, help_text="SHA-256 of the canonical request")
    status = models.CharField(
        max_length=16, choices=OperationStatus, default=OperationStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    unit = models.ForeignKey(GPUUnit, on_delete=models.CASCADE, related_name="operations")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "operation_id"], name="operation_id_unique_per_tenant"
            ),
        ]
        indexes = [models.Index(fields=["status", "updated_at"], name="operation_open")]

    def __str__(self) -> str:
        return f"{self.kind} {self.operation_id} ({self.status})"


class EventType(models.TextChoices):
    NORMAL = "Normal"
    WARNING = "Warning"


class UnitEvent(models.Model):
    """One entry of a unit's timeline; a repeat of the latest entry bumps its count."""

    # Indexed by unit_event_timeline, which leads with it.
    unit = models.ForeignKey(
        GPUUnit, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    type = models.CharField(max_length=8, choices=EventType, default=EventType.NORMAL)
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    count = models.PositiveIntegerField(default=1)
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(auto_now_add=True)
    # The time the cluster reported for what the entry records (UsageStarted: the pod's start
    # on its devices; UsageEnded: their release), where first_seen is when it was recorded.
    observed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["unit", "id"], name="unit_event_timeline"),
            models.Index(
                fields=["observed_at"],
                name="unit_event_observed",
                condition=models.Q(observed_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.unit}: {self.reason}"


class TenantSecret(models.Model):
    """A tenant's secret (/secrets): the Kubernetes Secret `secret-<name>` in its namespace
    holds the values; this row holds only what may be shown (the name and key names), so the
    API lists, counts and checks references without reading a value."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=56, help_text="DNS label; the Secret is secret-<name>.")
    keys = models.JSONField(default=list, help_text="the Secret's key names, sorted; no values")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="secret_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.namespace}/{self.name}"

    @property
    def object_name(self) -> str:
        return manifests.secret_object_name(self.name)
