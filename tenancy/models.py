"""Tenants (a customer, its namespace, quota and usage counters), their API keys, the
dashboard users who act for them, and the audit log of every write they and ops make."""

from __future__ import annotations

import uuid
from typing import Any, NoReturn

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from controlplane.validation import (
    dns_label,
    dns_subdomain,
    fold_case,
    positive_quantity,
    validate_duration,
)
from dracel import quantity


def device_quota_problem(value: object) -> str | None:
    """Why a per-class device quota is not `{DeviceClass name: whole number >= 0}`."""
    if not isinstance(value, dict):
        return 'a mapping of device class to device count, e.g. {"nvidia-h100": 8}.'
    for name, count in value.items():
        if problem := dns_subdomain(name):
            return f"device class {problem}"
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            return f"the quota for {name} must be a whole number of devices, 0 or more."
    return None


def region_quota_problem(value: object) -> str | None:
    """Why a per-region device quota is not `{region: whole number >= 0}`."""
    if not isinstance(value, dict):
        return 'a mapping of region to device count, e.g. {"eu-west": 8}.'
    for name, count in value.items():
        if problem := dns_label(name):
            return f"region {problem}"
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            return f"the quota for {name} must be a whole number of devices, 0 or more."
    return None


class BudgetMode(models.TextChoices):
    ALERT = "alert"
    ENFORCE = "enforce"


# Namespaces a tenant may never be given: Kubernetes' own, and the control plane's (its
# ServiceAccounts' rights there would be the tenant's to reach). k8s/control-plane's admission
# policy refuses the control plane's writes in any namespace not labelled a tenant's.
RESERVED_NAMESPACES = frozenset({"default", "gpu-control-plane", "gateway-system"})


def reserved_namespace(name: str) -> str | None:
    """Why `name` cannot be a tenant's namespace, or None."""
    if name in RESERVED_NAMESPACES or name.startswith("kube-"):
        return f"{name} is reserved (kube-*, default and the control plane's own namespaces)."
    return None


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
    quota_storage = models.CharField(
        "storage quota", max_length=32, default="1Ti", help_text="Sum of the tenant's storages."
    )
    quota_storages = models.PositiveIntegerField("storage count quota", default=16)
    quota_ephemeral_storage = models.CharField(
        "ephemeral storage quota",
        max_length=32,
        default="1Ti",
        help_text="Local disk (container layers, logs) all the tenant's pods may use together; "
        "each pod is limited to its package's ephemeral storage.",
    )
    quota_devices = models.JSONField(
        "device quota per device class",
        default=dict,
        blank=True,
        help_text="Devices the tenant's claims may request per DeviceClass, e.g. "
        '{"nvidia-h100": 8} (no entry: no limit). Written into its ResourceQuota as '
        "<class>.deviceclass.resource.k8s.io/devices; a stopped unit's claim still counts.",
    )
    quota_regions = models.JSONField(
        "device quota per region",
        default=dict,
        blank=True,
        help_text='Devices the tenant\'s live units may hold in each region, e.g. {"eu-west": 8} '
        "(no entry: no limit there). An order naming no region goes where the tenant has room; "
        "a stopped unit still counts.",
    )
    max_stop_after = models.CharField(
        "longest stopAfter",
        max_length=16,
        blank=True,
        validators=[validate_duration],
        help_text='Units stop at most this long after they start, e.g. "8h" (blank: no limit). '
        "A unit ordered without stopAfter gets this one.",
    )
    billing_customer_id = models.CharField(
        "billing customer ID",
        max_length=255,
        blank=True,
        help_text="The tenant's customer in the billing system (e.g. a Stripe cus_…): usage "
        "exports name it; blank, they name the tenant's slug.",
    )
    is_operator = models.BooleanField(
        default=False, help_text="Operator keys may read the cluster-wide inventory."
    )
    monthly_budget = models.DecimalField(
        "monthly budget",
        max_digits=14,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="What the tenant may spend in a calendar month (UTC), in the billing currency "
        "(blank: no budget). Alerts at 50, 80 and 100 %.",
    )
    budget_mode = models.CharField(
        max_length=8,
        choices=BudgetMode,
        default=BudgetMode.ALERT,
        help_text='At 100 %: "alert" only alerts; "enforce" also refuses new orders and starts '
        "and stops the running units once the grace below has passed.",
    )
    budget_grace = models.CharField(
        "grace before units stop",
        max_length=16,
        default="1h",
        validators=[validate_duration],
        help_text='How long units keep running after the budget is spent, e.g. "1h" (enforce '
        "mode): the tenant sees when they stop.",
    )
    # When the month's spend reached the budget in enforce mode (set and cleared by beat's
    # billing.check_budgets): orders read it from the tenant row they lock anyway.
    budget_exceeded_at = models.DateTimeField(null=True, blank=True, editable=False)
    # What the tenant's live (not Terminated) units hold against the quota, kept like a
    # ResourceQuota's status.used: the order that creates a unit charges it under the tenant row
    # lock, the unit's termination gives it back (a stop gives back its CPU and memory, a start
    # takes them again), and recount_usage (beat) recounts it should it
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
        # What a staff account may do in the dashboard beyond its own tenants; granted through
        # the groups tenancy.staff makes (docs/api.md, "Staff permissions").
        permissions = [
            (
                "view_every_tenant",
                "Can see every tenant's units, storage, SSH keys and costs in the dashboard",
            ),
            (
                "act_for_every_tenant",
                "Can order, change, stop, start, restart and delete units, and add and delete "
                "storage and SSH keys, for every tenant in the dashboard",
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        self.slug = fold_case((self.slug or "").strip())
        self.namespace = fold_case((self.namespace or "").strip())
        self.quota_cpu = (self.quota_cpu or "").strip()
        self.quota_memory = (self.quota_memory or "").strip()
        self.quota_storage = (self.quota_storage or "").strip()
        self.quota_ephemeral_storage = (self.quota_ephemeral_storage or "").strip()
        errors = {
            "slug": dns_label(self.slug),
            "namespace": dns_label(self.namespace) or reserved_namespace(self.namespace),
            "quota_cpu": positive_quantity(self.quota_cpu, resource="cpu"),
            "quota_memory": positive_quantity(self.quota_memory, resource="memory"),
            "quota_storage": positive_quantity(self.quota_storage, resource="storage"),
            "quota_ephemeral_storage": positive_quantity(
                self.quota_ephemeral_storage, resource="ephemeral-storage"
            ),
        }
        errors["quota_devices"] = device_quota_problem(self.quota_devices)
        errors["quota_regions"] = region_quota_problem(self.quota_regions)
        problems = {field: message for field, message in errors.items() if message}
        if problems:
            raise ValidationError(problems)

    @property
    def quota_cpu_millicores(self) -> int:
        return quantity.parse_cpu(self.quota_cpu)

    @property
    def quota_memory_bytes(self) -> int:
        return quantity.parse_bytes(self.quota_memory)

    @property
    def quota_storage_bytes(self) -> int:
        return quantity.parse_bytes(self.quota_storage)

    @property
    def quota_ephemeral_storage_bytes(self) -> int:
        return quantity.parse_bytes(self.quota_ephemeral_storage)


API_KEY_NAME_MAX = 100


class ApiKey(models.Model):
    """A tenant's API key. Only a SHA-256 of the secret is stored; the key is shown once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(
        max_length=API_KEY_NAME_MAX, blank=True, help_text="What the key is used for."
    )
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


class SSHKey(models.Model):
    """A public key a tenant registered once for SSH into its units (§11). Only the public
    half is ever held; units get the tenant's keys through a Secret, never their spec."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=63, help_text="DNS label naming the key, e.g. laptop.")
    kind = models.CharField(max_length=32, editable=False)
    bits = models.PositiveIntegerField(editable=False)
    public_key = models.TextField(editable=False, help_text="`<type> <base64>`, no comment.")
    comment = models.CharField(max_length=256, blank=True, editable=False)
    fingerprint = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "SSH key"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="sshkey_unique_name"),
            models.UniqueConstraint(
                fields=["tenant", "fingerprint"], name="sshkey_unique_fingerprint"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"


class AuditSource(models.TextChoices):
    API = "api", "API"
    DASHBOARD = "dashboard", "dashboard"
    ADMIN = "admin", "admin"
    # An operator's management command (pruning the log's old months).
    COMMAND = "command", "command"


class AuditActorKind(models.TextChoices):
    API_KEY = "api_key", "API key"
    USER = "user", "user"


class AuditOutcome(models.TextChoices):
    SUCCESS = "success", "success"
    FAILURE = "failure", "failure"


class AppendOnly(TypeError):
    """An audit event was to be changed or deleted: the log only grows."""


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise AppendOnly("Audit events are never changed.")

    def delete(self) -> NoReturn:
        raise AppendOnly("Audit events are never deleted.")


class AuditEvent(models.Model):
    """One write through the API, the dashboard or the admin, as it ended: who (an API key's
    prefix or a user's name), for which tenant, what (the action and its target), the request
    id and the outcome. Never a request body. Rows are only ever inserted: the ORM refuses to
    change or delete them and a trigger in the database refuses UPDATE and DELETE (migration
    0013). The table is partitioned by month (migration 0015): a month past the retention goes
    whole (tenancy/audit_partitions.py), itself an audited write. The tenant is kept by id and
    slug without a foreign key constraint, so a tenant's history outlives the tenant (its
    deletion is itself an audited write)."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    occurred_at = models.DateTimeField(default=timezone.now, editable=False)
    source = models.CharField(max_length=9, choices=AuditSource)
    actor_kind = models.CharField(max_length=7, choices=AuditActorKind)
    actor = models.CharField(max_length=150, help_text="An API key's prefix, or a username.")
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # audit_event_tenant leads with it
    )
    tenant_slug = models.CharField("tenant", max_length=63, blank=True)
    action = models.CharField(
        max_length=100,
        help_text="The API's operationId (units_create), the same for the dashboard's writes, "
        "or <app>.<model>.<verb> for the admin's.",
    )
    target_kind = models.CharField(max_length=100, blank=True)
    target_name = models.CharField(max_length=255, blank=True)
    method = models.CharField(max_length=7)
    path = models.CharField(max_length=500)
    status = models.PositiveSmallIntegerField(help_text="The HTTP status of the answer.")
    outcome = models.CharField(max_length=7, choices=AuditOutcome)
    error_code = models.CharField(max_length=64, blank=True)
    request_id = models.CharField("request ID", max_length=128, blank=True)
    remote_address = models.GenericIPAddressField(null=True, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["tenant", "-id"], name="audit_event_tenant"),
            # The log is written in time order: a block range index finds a period cheaply
            # and costs next to nothing per insert.
            BrinIndex(fields=["occurred_at"], name="audit_event_occurred"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor} ({self.outcome})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnly("Audit events are never changed.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnly("Audit events are never deleted.")


class WebhookEndpoint(models.Model):
    """A tenant's webhook: where its events are sent (`url`), which ones (`events`, "*" for
    all) and the secret they are signed with (Standard Webhooks: `whsec_` and base64). The
    secret is shown once, when made; after a rotation the previous one keeps signing beside it
    until `previous_secret_until`, so a receiver can switch without losing a delivery."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="webhooks", db_index=False
    )
    url = models.URLField(max_length=2048)
    description = models.CharField(max_length=200, blank=True)
    events = ArrayField(models.CharField(max_length=64))
    enabled = models.BooleanField(default=True)
    secret = models.CharField(max_length=100, editable=False)
    previous_secret = models.CharField(max_length=100, blank=True, editable=False)
    previous_secret_until = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["tenant", "enabled"], name="webhook_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant_id}: {self.url}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class WebhookDelivery(models.Model):
    """One event on its way to one endpoint: the outbox row of a webhook. It is written in
    the transaction that made the event and sent after commit; a lost message is sent again
    by the sweeper. Pending until a 2xx answers it or its retries run out (failed). Rows with
    the same `ordering_key` (one unit's, one volume's) are delivered in id order: a later one
    waits while an earlier one is pending."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    event_id = models.UUIDField(help_text="The event's id: webhook-id and the CloudEvent's id.")
    event_type = models.CharField(max_length=64)
    ordering_key = models.CharField(max_length=80, blank=True)
    payload = models.JSONField(help_text="The CloudEvent sent, as sent.")
    status = models.CharField(max_length=9, choices=DeliveryStatus, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    leased_until = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["endpoint", "-id"], name="webhook_delivery_endpoint"),
            models.Index(
                fields=["endpoint", "ordering_key", "id"],
                name="webhook_delivery_order",
                condition=models.Q(status="pending"),
            ),
            models.Index(
                fields=["next_attempt_at"],
                name="webhook_delivery_due",
                condition=models.Q(status="pending"),
            ),
            BrinIndex(fields=["created_at"], name="webhook_delivery_created"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} to {self.endpoint_id} ({self.status})"

    @property
    def message_id(self) -> str:
        return f"msg_{self.event_id.hex}"


class WebhookAttempt(models.Model):
    """One try at sending a delivery: what the receiver answered, or why nothing did."""

    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log", db_index=False
    )
    at = models.DateTimeField(default=timezone.now)
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    response = models.CharField(max_length=1000, blank=True, help_text="The answer's start.")

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["delivery", "id"], name="webhook_attempt_delivery")]

    def __str__(self) -> str:
        return f"{self.delivery_id} at {self.at}: {self.status or self.error}"
