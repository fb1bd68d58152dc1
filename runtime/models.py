"""Tenants and their API keys, GPU units, the operations that change them, and unit timelines."""

from __future__ import annotations

import enum
import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from catalog import validation
from dracel import quantity


class Tenant(models.Model):
    """A customer: owns one Kubernetes namespace and a quota there."""

    slug = models.SlugField(max_length=63, unique=True, help_text="Short ID, a DNS label.")
    display_name = models.CharField(max_length=200, blank=True)
    namespace = models.CharField(
        max_length=63, unique=True, help_text="Kubernetes namespace holding the tenant's units."
    )
    quota_cpu = models.CharField("CPU quota", max_length=32, default="160")
    quota_memory = models.CharField("memory quota", max_length=32, default="256Gi")
    quota_claims = models.PositiveIntegerField("claim quota", default=64)
    is_operator = models.BooleanField(
        default=False, help_text="Operator keys may read the cluster-wide inventory."
    )
    # What the tenant's live (not Terminated) units hold against the quota, kept like a
    # ResourceQuota's status.used: the order that creates a unit charges it under the tenant row
    # lock, the unit's termination gives it back, and reconcile_units recounts it should it
    # ever drift. Orders read one row instead of summing every live unit.
    used_cpu_millicores = models.BigIntegerField(default=0, editable=False)
    used_memory_bytes = models.BigIntegerField(default=0, editable=False)
    used_claims = models.IntegerField(default=0, editable=False)
    users = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="tenants",
        help_text="Dashboard users who act for this tenant.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        self.slug = (self.slug or "").strip().lower()
        self.namespace = (self.namespace or "").strip().lower()
        errors = {
            "slug": validation.dns_label(self.slug),
            "namespace": validation.dns_label(self.namespace),
            "quota_cpu": validation.positive_quantity(self.quota_cpu, resource="cpu"),
            "quota_memory": validation.positive_quantity(self.quota_memory, resource="memory"),
        }
        problems = {field: message for field, message in errors.items() if message}
        if problems:
            raise ValidationError(problems)

    @property
    def quota_cpu_millicores(self) -> int:
        return quantity.parse_cpu(self.quota_cpu)

    @property
    def quota_memory_bytes(self) -> int:
        return quantity.parse_bytes(self.quota_memory)


class ApiKey(models.Model):
    """A tenant's API key. Only a SHA-256 of the secret is stored; the key is shown once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True, help_text="What the key is used for.")
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class UnitPhase(models.TextChoices):
    ACCEPTED = "Accepted"
    PROVISIONING = "Provisioning"
    PENDING = "Pending"
    RUNNING = "Running"
    FAILED = "Failed"
    TERMINATING = "Terminating"
    TERMINATED = "Terminated"

    # A unit keeps its name and its share of the tenant quota until it is Terminated.
    LIVE = enum.nonmember(
        frozenset({"Accepted", "Provisioning", "Pending", "Running", "Failed", "Terminating"})
    )
    # Phases reconcile_units derives from the cluster; the others are driven by requests.
    OBSERVED = enum.nonmember(frozenset({"Provisioning", "Pending", "Running", "Failed"}))


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
    # The package contract as it was when the unit was ordered.
    package_id = models.CharField("package ID", max_length=63)
    spec_name = models.CharField(max_length=253)
    cpu = models.CharField(max_length=32)
    memory = models.CharField(max_length=32)
    cpu_millicores = models.BigIntegerField(help_text="cpu as a number, for quota sums")
    memory_bytes = models.BigIntegerField(help_text="memory as a number, for quota sums")
    gpu = models.PositiveIntegerField()
    device_class_name = models.CharField(max_length=253)
    claim_name = models.CharField(max_length=63)
    claim_request_name = models.CharField(max_length=63)
    count = models.PositiveIntegerField()
    selectors = models.JSONField(default=list, blank=True)
    capacity = models.JSONField(default=dict, blank=True)
    image = models.CharField(max_length=512)
    template = models.JSONField(default=dict, blank=True)
    # Observed state.
    phase = models.CharField(max_length=16, choices=UnitPhase, default=UnitPhase.ACCEPTED)
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    dra = models.JSONField(default=dict, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    unit_k8s_uid = models.CharField("GPUUnit UID", max_length=64, blank=True)
    claim_k8s_uid = models.CharField("ResourceClaim UID", max_length=64, blank=True)
    pod_k8s_uid = models.CharField("Pod UID", max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    terminated_at = models.DateTimeField(null=True, blank=True)

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
        ]
        indexes = [
            models.Index(fields=["tenant", "-id"], name="unit_tenant_recent"),
            models.Index(fields=["phase"], name="unit_phase"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pod_name(self) -> str:
        return f"unit-{self.name}"

    @property
    def is_live(self) -> bool:
        return self.phase in UnitPhase.LIVE


class OperationKind(models.TextChoices):
    CREATE = "create"
    DELETE = "delete"


class OperationStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    OPEN = enum.nonmember(frozenset({"pending", "running"}))


class Operation(models.Model):
    """A create or delete request. It is the outbox: the sweeper re-enqueues open ones."""

    # Indexed by operation_id_unique_per_tenant, which leads with it.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="operations", db_index=False
    )
    operation_id = models.CharField("operation ID", max_length=128)
    kind = models.CharField(max_length=8, choices=OperationKind)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the canonical request")
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

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["unit", "id"], name="unit_event_timeline")]

    def __str__(self) -> str:
        return f"{self.unit}: {self.reason}"
