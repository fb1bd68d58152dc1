"""Prices and the usage ledger (ARCHITECTURE §15).

A unit's usage is metered while it is Running on allocated devices: a `Meter` is the one
mutable row, open while that lasts; closing it (or sealing the hours it has run through)
writes immutable `UsageRecord`s, half-open `[start, end)`, split at UTC hours and at price
changes, each priced by the `PriceVersion` in force. Units, packages and tenants are named by
value (uid, package ID), not by foreign key to the runtime: the ledger outlives them.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from tenancy.models import Tenant


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
    """A unit's usage being metered now: opened when it reached Running on allocated devices,
    closed (deleted, its time written as UsageRecords) when it leaves Running. `started_at`
    moves forward as whole hours are sealed; `seen_at` is the last time a full reconcile saw
    the unit Running, where a close that no event made ends it."""

    unit_uid = models.UUIDField(unique=True)
    unit_name = models.CharField(max_length=54)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    package_id = models.CharField(max_length=63)
    alternative = models.CharField(max_length=63, blank=True)
    claim_uid = models.CharField(max_length=64, blank=True)
    # [{pool, device, shareID?, consumedCapacity?}] as allocated.
    devices = models.JSONField(default=list)
    quantity_unit = models.CharField(max_length=16, choices=QuantityUnit)
    # Devices (or shares) held: the quantity is this many times the seconds.
    count = models.PositiveIntegerField()
    opened_at = models.DateTimeField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.unit_name} since {self.opened_at:%Y-%m-%d %H:%M:%S}"


class UsageRecord(models.Model):
    """One immutable ledger row: `[start, end)` of a unit's held devices, within one UTC hour
    and one price version. Its id is deterministic (billing.periods.record_id), so exports are
    idempotent; a correction is a new row (`corrects`) with the quantity and cost negated."""

    id = models.UUIDField(primary_key=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    unit_uid = models.UUIDField()
    unit_name = models.CharField(max_length=54)
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
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["start", "unit_uid"]
        constraints = [
            models.CheckConstraint(
                condition=Q(end__gt=models.F("start")), name="usage_end_after_start"
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "start"], name="usage_tenant_start"),
            models.Index(fields=["start"], name="usage_start"),
            models.Index(fields=["unit_uid", "start"], name="usage_unit_start"),
        ]

    def __str__(self) -> str:
        return f"{self.unit_name} {self.start:%Y-%m-%d %H:%M:%S}+{self.seconds}s"
