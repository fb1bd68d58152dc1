"""Prices and the usage ledger (ARCHITECTURE §15).

A unit's usage is metered while it is Running on allocated devices: a `Meter` is the one
mutable row, open while that lasts; closing it (or sealing the hours it has run through)
writes immutable `UsageRecord`s, half-open `[start, end)`, split at UTC hours and at price
changes, each priced by the `PriceVersion` in force. Units, packages and tenants are named by
value (uid, package ID), not by foreign key to the runtime: the ledger outlives them.
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeBoundary, RangeOperators
from django.db import models
from django.db.models import Func, Q

from tenancy.models import Tenant


class TsTzRange(Func):
    """PostgreSQL's tstzrange(start, end, '[)'): a record's half-open interval."""

    function = "TSTZRANGE"
    output_field = DateTimeRangeField()


class QuantityUnit(models.TextChoices):
    DEVICE_SECONDS = "device-seconds"
    SHARE_SECONDS = "share-seconds"


class PriceVersion(models.Model):
    """A package's hourly price (or one fallback alternative's) from `effective_from` until
    the next version of the same package and alternative. Never edited: a change is a new
    version (billing.prices records one whenever a package's price is saved)."""

    package_id = models.CharField("package ID", max_length=63)
    # "" for the package's own device class; else the alternative's name.
    alternative = models.CharField(max_length=63, blank=True)
    hourly = models.DecimalField("hourly price", max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3)
    effective_from = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["package_id", "alternative", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["package_id", "alternative", "effective_from"],
                name="price_version_unique_start",
            )
        ]

    def __str__(self) -> str:
        what = f"{self.package_id}/{self.alternative}" if self.alternative else self.package_id
        return (
            f"{what} {self.hourly} {self.currency}/h from {self.effective_from:%Y-%m-%d %H:%M:%S}"
        )


class Meter(models.Model):
    """A unit's usage being metered now: opened when its pod ran on allocated devices (at the
    time the cluster reports it started), closed (deleted, its time written as UsageRecords)
    when that pod released them (at the time the cluster reports its containers ended).
    `started_at` moves forward as whole hours are sealed; `seen_at` is the last time a
    reconcile saw the pod running (PostgreSQL's clock), where an end the cluster cannot date
    is put; `missing_since`, when the backstop first found the pod gone with no last state."""

    unit_uid = models.UUIDField(unique=True)
    unit_name = models.CharField(max_length=54)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    # The region of the unit's cluster when the meter opened ("" before regions were kept).
    region = models.CharField(max_length=63, blank=True)
    package_id = models.CharField(max_length=63)
    alternative = models.CharField(max_length=63, blank=True)
    claim_uid = models.CharField(max_length=64, blank=True)
    # The pod holding the devices (its end closes the meter) and when it was created.
    pod_uid = models.CharField(max_length=64, blank=True)
    pod_created_at = models.DateTimeField(null=True, blank=True)
    # [{pool, device, shareID?, consumedCapacity?}] as allocated.
    devices = models.JSONField(default=list)
    quantity_unit = models.CharField(max_length=16, choices=QuantityUnit)
    # Devices (or shares) held: the quantity is this many times the seconds.
    count = models.PositiveIntegerField()
    opened_at = models.DateTimeField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()
    missing_since = models.DateTimeField(null=True, blank=True)
    # A unit on a reservation: its time before the reservation's end is the reservation's
    # used time (records cut there, tagged with it).
    reservation_uid = models.UUIDField(null=True, blank=True)
    reservation_end = models.DateTimeField(null=True, blank=True)
    # A reservation's slot held by its placeholder (no unit takes it): unit_uid is the slot's
    # (ledger.slot_resource_uid), unit_name `<name>/<slot>`; its time is the reservation's
    # unused time.
    placeholder = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.unit_name} since {self.opened_at:%Y-%m-%d %H:%M:%S}"


class Commitment(models.Model):
    """What a reservation commits its tenant to (ARCHITECTURE §22): `slots` slots of `devices`
    devices from `start` to `end` at the package's price, at most (a slot is billed only while
    it holds devices). Written with the reservation, gone when it is cancelled; budgets,
    forecasts, GET /quota and statements count the part still to come."""

    reservation_uid = models.UUIDField(unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=63)
    package_id = models.CharField(max_length=63)
    region = models.CharField(max_length=63, blank=True)
    slots = models.PositiveIntegerField()
    devices = models.PositiveIntegerField()
    start = models.DateTimeField()
    end = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "end"], name="commitment_tenant_end")]

    def __str__(self) -> str:
        return f"{self.name}: {self.slots}x{self.devices} until {self.end:%Y-%m-%d %H:%M:%S}"


class MeteredPod(models.Model):
    """Every pod whose usage a unit's meter followed: when the cluster says it was created and,
    once its meter closed, until when it was billed. An observation of a pod metered before, or
    older than one metered since (a late or stale view), bills nothing."""

    unit_uid = models.UUIDField()
    pod_uid = models.CharField(max_length=64)
    created_at = models.DateTimeField(help_text="the pod's creationTimestamp")
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["unit_uid", "pod_uid"], name="metered_pod_once")
        ]

    def __str__(self) -> str:
        return f"{self.unit_uid}/{self.pod_uid}"


class ReservationUse(models.TextChoices):
    USED = "Used"
    UNUSED = "Unused"


class UsageRecord(models.Model):
    """One immutable ledger row: `[start, end)` of a unit's held devices, within one UTC hour
    and one price version. Its id is deterministic (billing.periods.record_id), so exports are
    idempotent; a correction is a new row (`corrects`) with the quantity and cost negated."""

    id = models.UUIDField(primary_key=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    unit_uid = models.UUIDField()
    unit_name = models.CharField(max_length=54)
    # Its meter's region ("" for rows written before regions were kept).
    region = models.CharField(max_length=63, blank=True)
    package_id = models.CharField(max_length=63)
    alternative = models.CharField(max_length=63, blank=True)
    claim_uid = models.CharField(max_length=64, blank=True)
    devices = models.JSONField(default=list)
    start = models.DateTimeField()
    end = models.DateTimeField()
    seconds = models.DecimalField(max_digits=12, decimal_places=6)
    quantity = models.DecimalField(max_digits=16, decimal_places=6)
    quantity_unit = models.CharField(max_length=16, choices=QuantityUnit)
    price_version = models.ForeignKey(
        PriceVersion, on_delete=models.PROTECT, null=True, related_name="+"
    )
    hourly = models.DecimalField("hourly price", max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3)
    cost = models.DecimalField(max_digits=16, decimal_places=6)
    corrects = models.OneToOneField(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="correction"
    )
    note = models.CharField(max_length=200, blank=True)
    # FOCUS CapacityReservationId and CapacityReservationStatus: a unit's time on a
    # reservation (used), or a reservation's slot time no unit used (unused: unit_uid is the
    # slot's, ledger.slot_resource_uid; unit_name `<name>/<slot>`).
    reservation_uid = models.UUIDField(null=True, blank=True)
    reservation_status = models.CharField(max_length=8, choices=ReservationUse, blank=True)
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["start", "unit_uid"]
        constraints = [
            models.CheckConstraint(
                condition=Q(end__gt=models.F("start")), name="usage_end_after_start"
            ),
            # A unit's usage is one line in time: no two of its records (corrections aside)
            # cover the same instant, whoever wrote them and with whatever clock.
            ExclusionConstraint(
                name="usage_no_overlap",
                expressions=[
                    ("unit_uid", RangeOperators.EQUAL),
                    (TsTzRange("start", "end", RangeBoundary()), RangeOperators.OVERLAPS),
                ],
                condition=Q(corrects__isnull=True),
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "start"], name="usage_tenant_start"),
            # Exports read rows in (start, id) order: the index hands them over sorted.
            models.Index(fields=["start", "id"], name="usage_start_id"),
            models.Index(fields=["unit_uid", "start"], name="usage_unit_start"),
        ]

    def __str__(self) -> str:
        return f"{self.unit_name} {self.start:%Y-%m-%d %H:%M:%S}+{self.seconds}s"


class BudgetAlert(models.Model):
    """A tenant's month's spend reached `threshold` percent of its budget (50, 80, 100): once
    per tenant, month and threshold, shown by GET /budget and the dashboard."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budget_alerts")
    month = models.DateField(help_text="The first day of the UTC month.")
    threshold = models.PositiveSmallIntegerField()
    budget = models.DecimalField(max_digits=14, decimal_places=2)
    spent = models.DecimalField(max_digits=16, decimal_places=6)
    at = models.DateTimeField()

    class Meta:
        ordering = ["tenant", "-month", "threshold"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "month", "threshold"], name="budget_alert_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant} {self.month:%Y-%m} {self.threshold} %"


class Grain(models.TextChoices):
    DAY = "day"
    MONTH = "month"


class Rollup(models.Model):
    """The sums of the ledger rows that start in one UTC day or month (`grain`, `period` its
    first day), kept as the rows are written (billing.rollups), so what pages and APIs show
    reads a row per group and period, not every row of the ledger. Corrections count in
    (negative)."""

    grain = models.CharField(max_length=5, choices=Grain)
    period = models.DateField()
    # Derived data: the ledger's own rows keep a tenant with usage (PROTECT).
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    package_id = models.CharField(max_length=63)
    quantity_unit = models.CharField(max_length=16, choices=QuantityUnit)
    records = models.IntegerField(default=0)
    seconds = models.DecimalField(max_digits=20, decimal_places=6, default=0)
    quantity = models.DecimalField(max_digits=24, decimal_places=6, default=0)
    cost = models.DecimalField(max_digits=24, decimal_places=6, default=0)
    first_start = models.DateTimeField(null=True)
    last_end = models.DateTimeField(null=True)

    class Meta:
        abstract = True


# What tells rollup rows apart (billing.rollups adds to the row of each key).
UNIT_ROLLUP_KEY = (
    "grain",
    "period",
    "tenant",
    "unit_uid",
    "unit_name",
    "package_id",
    "alternative",
    "price_version_id",
    "hourly",
    "currency",
    "quantity_unit",
    "correction",
)
PACKAGE_ROLLUP_KEY = ("grain", "period", "tenant", "package_id", "region", "quantity_unit")


class UnitRollup(Rollup):
    """A unit's rows in a day or month, apart by what a statement line tells apart (package,
    alternative, price version, kind): statements, cost to date and usage by unit."""

    unit_uid = models.UUIDField()
    unit_name = models.CharField(max_length=54)
    alternative = models.CharField(max_length=63, blank=True)
    price_version_id = models.IntegerField(null=True)
    hourly = models.DecimalField(max_digits=12, decimal_places=4)
    currency = models.CharField(max_length=3)
    correction = models.BooleanField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=list(UNIT_ROLLUP_KEY), name="unit_rollup_key", nulls_distinct=False
            )
        ]
        indexes = [
            models.Index(fields=["tenant", "grain", "period"], name="unit_rollup_tenant"),
            models.Index(fields=["unit_uid", "grain"], name="unit_rollup_unit"),
        ]

    def __str__(self) -> str:
        return f"{self.unit_name} {self.grain} {self.period}"


class PackageRollup(Rollup):
    """A tenant's rows of one package in one region in a day or month: totals, budgets,
    usage by package, day, region or tenant."""

    # The rows' region ("" for rows written before regions were kept).
    region = models.CharField(max_length=63, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=list(PACKAGE_ROLLUP_KEY), name="package_rollup_key")
        ]
        indexes = [models.Index(fields=["grain", "period"], name="package_rollup_period")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.package_id} {self.grain} {self.period}"


class ExportState(models.TextChoices):
    REQUESTED = "requested"
    RUNNING = "running"
    READY = "ready"
    FAILED = "failed"


class UsageExport(models.Model):
    """An export of the ledger rows that start in `[start, end)`, made by a Celery worker
    (billing.jobs): requested, running with the rows done so far, then ready to download (its
    bytes in `parts`) or failed. Kept for BILLING_EXPORT_RETENTION_HOURS after it finished."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    format = models.CharField(max_length=16)
    start = models.DateTimeField()
    end = models.DateTimeField()
    source = models.CharField(max_length=255, blank=True, help_text="CloudEvents source")
    state = models.CharField(max_length=9, choices=ExportState, default=ExportState.REQUESTED)
    rows_total = models.BigIntegerField(null=True, blank=True)
    rows_done = models.BigIntegerField(default=0)
    size = models.BigIntegerField("bytes", default=0)
    stored = models.BigIntegerField(
        "bytes stored", default=0, help_text="gzip-compressed, as the parts hold them"
    )
    error = models.CharField(max_length=500, blank=True)
    requested_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["finished_at"], name="usage_export_finished")]

    def __str__(self) -> str:
        return f"{self.format} {self.start:%Y-%m-%d}..{self.end:%Y-%m-%d} ({self.state})"


class UsageExportPart(models.Model):
    """A piece of an export's gzip stream, in order (a few MB each: a download streams them
    one by one, and any process can serve it)."""

    export = models.ForeignKey(UsageExport, on_delete=models.CASCADE, related_name="parts")
    index = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        ordering = ["export", "index"]
        constraints = [
            models.UniqueConstraint(fields=["export", "index"], name="usage_export_part_once")
        ]

    def __str__(self) -> str:
        return f"{self.export_id}#{self.index}"
