"""The Package: a sellable GPU model x count + CPU + memory, with its DRA allocation."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Lower

from catalog import offers, validation
from controlplane.validation import (
    dns_label,
    dns_subdomain,
    fold_case,
    positive_quantity,
    validate_dns_label,
    validate_duration,
)
from dracel import quantity

# Model field -> the path customers and ops see in JSON and YAML.
FIELD_PATHS = {
    "id": "id",
    "spec_name": "specName",
    "cpu": "cpu",
    "memory": "memory",
    "gpu": "gpu",
    "device_class_name": "allocation.deviceClassName",
    "claim_request_name": "allocation.claimRequestName",
    "count": "allocation.count",
    "selectors": "allocation.selectors",
    "capacity": "allocation.capacity",
    "alternatives": "allocation.alternatives",
    "match_attribute": "allocation.matchAttribute",
    "max_stop_after": "maxStopAfter",
    "ephemeral_storage": "ephemeralStorage",
    "termination_grace_seconds": "terminationGracePeriodSeconds",
    "regions": "regions",
    "price": "price",
    "alternative_prices": "alternativePrices",
    "interruptible": "interruptible",
    "interruptible_price": "interruptible.price",
    "preemption_notice_seconds": "interruptible.noticeSeconds",
    "active": "active",
}


ALTERNATIVE_KEYS = ("name", "deviceClassName", "count", "selectors", "capacity")

# A unit's containers get this long after SIGTERM: Kubernetes' own default unless ops say
# otherwise, and never more than an hour (the unit is billed until its devices are released).
DEFAULT_TERMINATION_GRACE_SECONDS = 30
MAX_TERMINATION_GRACE_SECONDS = 3600
# The one message for a grace out of range or not a number (%(value)s: what was given).
TERMINATION_GRACE_RANGE = (
    f"terminationGracePeriodSeconds must be a whole number of seconds from 0 to "
    f"{MAX_TERMINATION_GRACE_SECONDS}, not %(value)s."
)
# An interruptible unit's notice before its pod is deleted (ARCHITECTURE §22): two minutes
# unless ops say otherwise, at most an hour.
DEFAULT_PREEMPTION_NOTICE_SECONDS = 120
MAX_PREEMPTION_NOTICE_SECONDS = 3600
PREEMPTION_NOTICE_RANGE = (
    f"interruptible.noticeSeconds must be a whole number of seconds from 0 to "
    f"{MAX_PREEMPTION_NOTICE_SECONDS}, not %(value)s."
)


class Package(models.Model):
    id = models.CharField(
        primary_key=True,
        max_length=63,
        help_text="Package ID customers pass as packageID: a DNS-1123 label, stored lower-case.",
        error_messages={"unique": "A package with this ID already exists."},
    )
    spec_name = models.CharField(
        "spec name", max_length=253, help_text="Product name, e.g. gpu.rtx3080.2x.10c.40g."
    )
    cpu = models.CharField(max_length=32, help_text='Kubernetes quantity, e.g. "10" or "500m".')
    memory = models.CharField(max_length=32, help_text='Kubernetes quantity, e.g. "40Gi".')
    gpu = models.PositiveIntegerField(
        "GPUs", validators=[MinValueValidator(1)], help_text="GPUs per unit; equals count."
    )
    device_class_name = models.CharField(
        "device class", max_length=253, help_text="DRA DeviceClass the claim requests from."
    )
    claim_request_name = models.CharField(
        "claim request name",
        max_length=63,
        default="gpu",
        blank=True,
        help_text="Name of the request inside the ResourceClaim (a DNS label; empty = gpu).",
    )
    count = models.PositiveIntegerField(
        "device count",
        validators=[MinValueValidator(1)],
        help_text="Devices requested (ExactCount); must equal GPUs.",
    )
    selectors = models.JSONField(
        default=list, blank=True, help_text="CEL device selectors added to the claim request."
    )
    capacity = models.JSONField(
        default=dict, blank=True, help_text="Optional per-device capacity requests."
    )
    match_attribute = models.CharField(
        "match attribute",
        max_length=316,
        blank=True,
        help_text="Optional: all of a unit's devices agree on this attribute, a fully qualified "
        'name such as "gpu.nvidia.com/parentUUID" or "resource.kubernetes.io/pcieRoot" (the '
        "claim's constraints[].matchAttribute).",
    )
    alternatives = models.JSONField(
        default=list,
        blank=True,
        help_text="Fallbacks in order when the package's own class has no fit: "
        '[{"name": "l40s", "deviceClassName": "nvidia-l40s", "count": 1}] (at most 7). The '
        "claim asks firstAvailable; the unit shows which one it got.",
    )
    max_stop_after = models.CharField(
        "longest stopAfter",
        max_length=16,
        blank=True,
        validators=[validate_duration],
        help_text='Units of this package stop at most this long after they start, e.g. "8h" '
        "(blank: no limit). A unit ordered without stopAfter gets this one.",
    )
    ephemeral_storage = models.CharField(
        "ephemeral storage",
        max_length=32,
        blank=True,
        help_text="Local disk a unit of this package may write outside its storages (container "
        'layer, logs), e.g. "50Gi": the pod\'s ephemeral-storage request and limit, counted '
        "against the tenant's ResourceQuota. Blank: PACKAGE_EPHEMERAL_STORAGE.",
    )
    termination_grace_seconds = models.PositiveIntegerField(
        "termination grace (seconds)",
        default=DEFAULT_TERMINATION_GRACE_SECONDS,
        validators=[
            MinValueValidator(0, message=TERMINATION_GRACE_RANGE),
            MaxValueValidator(MAX_TERMINATION_GRACE_SECONDS, message=TERMINATION_GRACE_RANGE),
        ],
        help_text="How long the containers of a unit of this package get after SIGTERM, when "
        "the unit is stopped, restarted or deleted, before they are killed (the pod's "
        "terminationGracePeriodSeconds, 0 to 3600). The unit is billed until its devices are "
        "released: up to this long after the stop, restart or delete request. A unit keeps the "
        "grace its package had when it was ordered.",
    )
    regions = ArrayField(
        models.CharField(max_length=63, validators=[validate_dns_label]),
        verbose_name="regions",
        default=list,
        blank=True,
        help_text="Regions this package is sold in (DNS labels such as us-east); empty: every "
        "region.",
    )
    price = models.DecimalField(
        "hourly price",
        max_digits=12,
        decimal_places=4,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="What one unit of this package costs per hour it runs, in the billing "
        "currency (BILLING_CURRENCY). A change applies from the moment it is saved: billing "
        "keeps every version, and usage before the change keeps the price it had.",
    )
    alternative_prices = models.JSONField(
        "alternative prices",
        default=dict,
        blank=True,
        help_text='Hourly price per fallback alternative, e.g. {"l40s": "1.20"}; an alternative '
        "left out costs the package's price.",
    )
    interruptible = models.BooleanField(
        "sold as interruptible",
        default=False,
        help_text="Also sold as interruptible: cheaper units on free capacity, taken back "
        "(with the notice below) when an on-demand order, a start or a reservation needs "
        "their devices. On-demand units are never taken back.",
    )
    interruptible_price = models.DecimalField(
        "interruptible hourly price",
        max_digits=12,
        decimal_places=4,
        default=Decimal("0"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="What one interruptible unit of this package costs per hour it runs (any "
        "alternative it gets), at most the on-demand price. Versioned like the price.",
    )
    preemption_notice_seconds = models.PositiveIntegerField(
        "preemption notice (seconds)",
        default=DEFAULT_PREEMPTION_NOTICE_SECONDS,
        validators=[
            MinValueValidator(0, message=PREEMPTION_NOTICE_RANGE),
            MaxValueValidator(MAX_PREEMPTION_NOTICE_SECONDS, message=PREEMPTION_NOTICE_RANGE),
        ],
        help_text="Seconds between an interruptible unit's preemption notice (event, webhook "
        "unit.preempting) and the deletion of its pod, which then gets its termination grace.",
    )
    active = models.BooleanField(default=True, help_text="Only active packages can be ordered.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                Lower("id"),
                name="package_id_ci_unique",
                violation_error_message="A package with this ID (ignoring case) already exists.",
            ),
            models.CheckConstraint(
                condition=models.Q(gpu__gte=1),
                name="package_gpu_positive",
                violation_error_message="gpu must be greater than zero.",
            ),
            models.CheckConstraint(
                condition=models.Q(count=models.F("gpu")),
                name="package_count_equals_gpu",
                violation_error_message="allocation.count must equal gpu.",
            ),
        ]

    def __str__(self) -> str:
        return self.id

    def clean(self) -> None:
        """Normalise, then check every rule, reporting all failing fields at once."""
        self.id = fold_case((self.id or "").strip())
        self.spec_name = (self.spec_name or "").strip()
        self.cpu = (self.cpu or "").strip()
        self.memory = (self.memory or "").strip()
        self.ephemeral_storage = (self.ephemeral_storage or "").strip()
        self.device_class_name = (self.device_class_name or "").strip()
        self.claim_request_name = (self.claim_request_name or "").strip() or "gpu"
        if isinstance(self.selectors, list):
            self.selectors = [s.strip() if isinstance(s, str) else s for s in self.selectors]
        if isinstance(self.regions, list) and all(isinstance(r, str) for r in self.regions):
            self.regions = sorted(set(self.regions))

        errors: dict[str, str | None] = {
            "id": dns_label(self.id),
            "cpu": positive_quantity(self.cpu, resource="cpu"),
            "memory": positive_quantity(self.memory, resource="memory"),
            "ephemeral_storage": self.ephemeral_storage
            and positive_quantity(self.ephemeral_storage, resource="ephemeral-storage"),
            "device_class_name": dns_subdomain(self.device_class_name),
            "claim_request_name": dns_label(self.claim_request_name),
            "capacity": validation.capacity_requests(self.capacity),
        }
        self.alternatives, errors["alternatives"] = validation.alternatives(self.alternatives)
        self.match_attribute = (self.match_attribute or "").strip()
        self.alternative_prices, errors["alternative_prices"] = validation.alternative_prices(
            self.alternative_prices, [a.get("name") for a in self.alternatives or []]
        )
        errors["match_attribute"] = validation.match_attribute(self.match_attribute)
        if not isinstance(self.selectors, list):
            errors["selectors"] = "selectors must be a list of CEL expressions."
        else:
            errors["selectors"] = validation.cel_expressions(self.selectors)
        # Compared once both are numbers (clean_fields converts the valid ones first).
        if (
            self.interruptible
            and isinstance(self.interruptible_price, Decimal)
            and isinstance(self.price, Decimal)
            and self.interruptible_price > self.price
        ):
            errors["interruptible_price"] = (
                f"the interruptible price ({self.interruptible_price}) must not exceed the "
                f"on-demand price ({self.price})."
            )
        if self.gpu is not None and self.count is not None and self.gpu != self.count:
            errors["count"] = f"allocation.count ({self.count}) must equal gpu ({self.gpu})."
        if not errors["capacity"] and not errors["device_class_name"]:
            errors["capacity"] = offers.capacity_problem(self.device_class_name, self.capacity)
        if not errors["alternatives"]:
            errors["alternatives"] = next(
                (
                    f"alternative {a['name']}: {problem}"
                    for a in self.alternatives
                    if (
                        problem := offers.capacity_problem(
                            a["deviceClassName"], a.get("capacity") or {}
                        )
                    )
                ),
                None,
            )
        problems = {field: message for field, message in errors.items() if message}
        if problems:
            raise ValidationError(problems)

    def price_of(self, alternative: str = "", *, interruptible: bool = False) -> Decimal:
        """The hourly price of a unit that got `alternative` ("" for the package's own
        class); an interruptible unit's is the interruptible price, whatever it got."""
        if interruptible:
            return Decimal(self.interruptible_price)
        if alternative and alternative in (self.alternative_prices or {}):
            return Decimal(self.alternative_prices[alternative])
        return Decimal(self.price)

    @property
    def cpu_millicores(self) -> int:
        return quantity.parse_cpu(self.cpu)

    @property
    def memory_bytes(self) -> int:
        return quantity.parse_bytes(self.memory)

    @property
    def unit_ephemeral_storage(self) -> str:
        """What a unit of this package gets: its own amount, else the platform's default."""
        return self.ephemeral_storage or settings.PACKAGE_EPHEMERAL_STORAGE

    @property
    def allocation(self) -> dict:
        """The DRA allocation block as the article writes it (claimName is per unit)."""
        block: dict = {
            "deviceClassName": self.device_class_name,
            "claimRequestName": self.claim_request_name,
            "count": self.count,
        }
        if self.selectors:
            block["selectors"] = list(self.selectors)
        if self.capacity:
            block["capacity"] = dict(self.capacity)
        if self.match_attribute:
            block["matchAttribute"] = self.match_attribute
        if self.alternatives:
            # In the catalog's key order (PostgreSQL's jsonb stores keys its own way).
            block["alternatives"] = [
                {key: alternative[key] for key in ALTERNATIVE_KEYS if key in alternative}
                for alternative in self.alternatives
            ]
        return block
