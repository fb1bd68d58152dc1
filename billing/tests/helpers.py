"""Ledger rows at known times for tests: a package priced from long before, and a unit that
held its devices from one moment to another."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from billing import ledger
from billing.models import PriceVersion
from catalog.models import Package
from catalog.tests.factories import PackageFactory
from runtime import lifecycle
from runtime.models import GPUUnit

TWO_DEVICES = {
    "allocated": True,
    "devices": [{"pool": "n", "device": "gpu-0"}, {"pool": "n", "device": "gpu-1"}],
}


def priced(package_id: str, hourly: str, **fields) -> Package:
    """A package at `hourly`, that price in force since 2026-01-01 (saving the package
    records a version only from now, after the usage tests write)."""
    package = PackageFactory(id=package_id, price=hourly, **fields)
    PriceVersion.objects.create(
        package_id=package.id,
        hourly=Decimal(hourly),
        currency="USD",
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return package


def hold(unit: GPUUnit, start: datetime, end: datetime | None, *, dra: dict = TWO_DEVICES) -> None:
    """The unit held its devices from `start` until `end` (still running when None), as its
    transitions to and out of Running record it."""
    ledger.open_meter(lifecycle.holding(unit, dra=dra), at=start)
    if end is not None:
        ledger.close_meter(unit.uid, at=end)
