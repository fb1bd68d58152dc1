"""Inventory reads, all served from the mirror (never from the cluster)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from inventory.models import InventorySnapshot, PackageAvailability, SyncRun
from inventory.observe import Observation, build_document


@dataclass(frozen=True)
class Freshness:
    as_of: datetime | None
    stale: bool
    last_error: str = ""


def get_freshness() -> Freshness:
    """When the mirror was last refreshed, and whether to distrust it (last sync failed, or
    none succeeded recently)."""
    latest = SyncRun.objects.filter(finished_at__isnull=False).order_by("-started_at").first()
    as_of = InventorySnapshot.objects.filter(pk=1).values_list("as_of", flat=True).first()
    too_old = as_of is None or timezone.now() - as_of > timedelta(
        seconds=settings.INVENTORY_STALE_AFTER_SECONDS
    )
    failed = latest is not None and bool(latest.error)
    return Freshness(
        as_of=as_of, stale=too_old or failed, last_error=latest.error if failed else ""
    )


def get_inventory_document() -> bytes:
    """`{"data": {"asOf": ..., "stale": ..., <stored document>}}` as JSON bytes. The stored
    document is spliced in as text rather than parsed and re-serialised, so this costs the same
    whatever the cluster's size. Before the first sync it is an empty inventory, stale."""
    snapshot = InventorySnapshot.objects.filter(pk=1).values_list("document", flat=True).first()
    if snapshot is None:
        snapshot = json.dumps(build_document(Observation()))
    freshness = get_freshness()
    head = json.dumps(
        {"asOf": freshness.as_of.isoformat() if freshness.as_of else None, "stale": freshness.stale}
    )
    body = snapshot[1:]
    return (
        f'{{"data": {head[:-1]}, {body}}}'.encode()
        if body != "}"
        else (f'{{"data": {head}}}'.encode())
    )


def list_package_availability() -> dict[str, PackageAvailability]:
    return {row.package_id: row for row in PackageAvailability.objects.all()}
