"""Ledger rows at known times for tests: a package priced from long before, and a unit that
held its devices from one moment to another."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from billing import ledger
from billing.models import PriceVersion
from catalog.models import Package
from catalog.tests.factories import PackageFactory
from runtime import usage_audit
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


def holding(unit: GPUUnit, dra: dict | None = None, pod_uid: str = "pod-1") -> ledger.Holding:
    """What the unit's pod `pod_uid` holds: the devices of `dra` (TWO_DEVICES by default)."""
    dra = TWO_DEVICES if dra is None else dra
    return ledger.Holding(
        unit_uid=unit.uid,
        unit_name=unit.name,
        tenant_id=unit.tenant_id,
        package_id=unit.package_id,
        claim_uid=unit.claim_k8s_uid,
        region=unit.region,
        pod_uid=pod_uid,
        alternative=dra.get("alternative", ""),
        devices=list(dra.get("devices") or []),
        count=unit.count,
    )


def hold(unit: GPUUnit, start: datetime, end: datetime | None, *, dra: dict = TWO_DEVICES) -> None:
    """The unit's pod held its devices from `start` until `end` (still running when None), as
    the reconcile meters what the cluster reports. Each hold is its own pod (a pod is
    metered once)."""
    assert ledger.open_meter(holding(unit, dra, pod_uid=f"pod-{start:%Y%m%d%H%M%S}"), at=start)
    if end is not None:
        ledger.close_meter(unit.uid, at=end)


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def claim_of(devices: int = 1) -> dict:
    """An allocated ResourceClaim of `devices` GPUs, as the cluster reports it."""
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n", "device": f"gpu-{i}"}
        for i in range(devices)
    ]
    return {
        "metadata": {"uid": "claim-1"},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def pod_of(
    uid: str,
    started: datetime,
    finished: datetime | None = None,
    *,
    deleted: datetime | None = None,
) -> dict:
    """A unit's pod as the cluster reports it: running since `started`, or its container
    ended at `finished`; `deleted`: its deletionTimestamp."""
    if finished is None:
        state = {"running": {"startedAt": stamp(started)}}
    else:
        state = {"terminated": {"startedAt": stamp(started), "finishedAt": stamp(finished)}}
    metadata = {"uid": uid, "creationTimestamp": stamp(started)}
    if deleted is not None:
        metadata["deletionTimestamp"] = stamp(deleted)
    return {
        "metadata": metadata,
        "status": {
            "phase": "Running" if finished is None else "Succeeded",
            "containerStatuses": [{"name": "main", "state": state}],
        },
    }


def package(**fields) -> Package:
    """A package whose price was in force before the test began: the cluster's times are whole
    seconds, so a pod may be said to start in the second before its package was saved."""
    made = PackageFactory(**fields)
    for version in PriceVersion.objects.filter(package_id=made.id):
        PriceVersion.objects.create(
            package_id=made.id,
            alternative=version.alternative,
            hourly=version.hourly,
            currency=version.currency,
            effective_from=version.effective_from - timedelta(minutes=1),
        )
    return made


def assert_usage_audited(timeout: float = 20.0) -> None:
    """The usage audit of the last day finds nothing: the ledger bills each unit for what its
    timeline says its pods held (waiting while meters are being closed, then failing with the
    differences)."""
    deadline = time.monotonic() + timeout
    while True:
        now = timezone.now()
        found = usage_audit.audit(now - timedelta(days=1), now + timedelta(minutes=1), now=now)
        if not found:
            return
        if time.monotonic() > deadline:
            raise AssertionError("usage audit: " + "; ".join(map(str, found)))
        time.sleep(0.1)  # a meter being closed: look again
