"""Inventory reads, all served from the mirror (never from the cluster)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import JSONField, Subquery
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Cast
from django.utils import timezone

from inventory import clusters
from inventory.models import Cluster, Device, InventorySnapshot, PackageAvailability, SyncRun
from inventory.observe import Observation, build_document
from inventory.placement import Candidate


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
    last_error = latest.error if latest is not None else ""
    return Freshness(as_of=as_of, stale=too_old or bool(last_error), last_error=last_error)


# The stored document this process served last, by its snapshot's as_of: it only changes with a
# sync, and reading it (600 KB at 10,000 devices, decompressed by PostgreSQL) and encoding it
# cost more than everything else the endpoint does.
_served: tuple[datetime, bytes] | None = None


def _stored_document(as_of: datetime | None) -> bytes:
    global _served
    served = _served
    if served is not None and served[0] == as_of:
        return served[1]
    row = InventorySnapshot.objects.filter(pk=1).values_list("as_of", "document").first()
    if row is None:
        return json.dumps(build_document(Observation())).encode()
    _served = (row[0], row[1].encode())
    return _served[1]


def get_inventory_document() -> bytes:
    """`{"data": {"asOf": ..., "stale": ..., <stored document>}}` as JSON bytes. The stored
    document is spliced in as bytes rather than parsed and re-serialised, and read from the
    database only when a sync replaced it, so this costs about the same whatever the cluster's
    size. Before the first sync it is an empty inventory, stale."""
    freshness = get_freshness()
    document = _stored_document(freshness.as_of)
    head = json.dumps(
        {"asOf": freshness.as_of.isoformat() if freshness.as_of else None, "stale": freshness.stale}
    ).encode()
    if document == b"{}":
        return b'{"data": ' + head + b"}"
    return b'{"data": ' + head[:-1] + b", " + document[1:] + b"}"


def list_package_availability() -> dict[str, PackageAvailability]:
    return {row.package_id: row for row in PackageAvailability.objects.all()}


DeviceKey = tuple[str, str, str]  # (driver, pool, device)


def device_taints(devices: Iterable[DeviceKey]) -> dict[DeviceKey, list[dict]]:
    """The mirrored taints of those of `devices` that have any, by (driver, pool, device):
    `[{"key", "value", "effect", "source"}]`, the slice's own first, then the DeviceTaintRules'
    (source `ResourceSlice/<name>` or `DeviceTaintRule/<name>`). One query for any number of
    devices (none for none)."""
    wanted = set(devices)
    if not wanted:
        return {}
    rows = (
        Device.objects.filter(
            driver__in={d for d, _p, _n in wanted},
            pool__in={p for _d, p, _n in wanted},
            name__in={n for _d, _p, n in wanted},
        )
        .exclude(taints=[])
        .values_list("driver", "pool", "name", "taints")
    )
    return {
        (driver, pool, name): [
            {key: taint.get(key, "") for key in ("key", "value", "effect", "source")}
            for taint in taints
        ]
        for driver, pool, name, taints in rows
        if (driver, pool, name) in wanted
    }


def shared_devices() -> list[dict]:
    """The last sync's `sharedDevices` (the operator inventory's), in its order: one
    statement, PostgreSQL picking them out of the stored document (the device rows do not say
    which devices allow multiple allocations, nor what their shares consume)."""
    shared = (
        InventorySnapshot.objects.filter(pk=1)
        .annotate(inventory=Cast("document", JSONField()))
        .values_list(KeyTransform("sharedDevices", "inventory"), flat=True)
        .first()
    )
    return list(shared or [])


@dataclass(frozen=True)
class ClusterState:
    cluster: Cluster
    health: str  # clusters.Health
    as_of: datetime | None
    last_error: str = ""

    @property
    def takes_units(self) -> bool:
        return not self.cluster.cordoned and self.health != clusters.Health.UNREACHABLE


def cluster_states(*, now: datetime | None = None) -> list[ClusterState]:
    """Every registered cluster with its health, in placement order, in one query (the
    clusters, with the mirror's as-of and the last sync's error as subqueries).

    Until observation runs per cluster, the one mirror is the enabled cluster's: a disabled
    cluster is not listed, so its health is unknown."""
    now = now or timezone.now()
    rows = list(
        Cluster.objects.annotate(
            as_of=Subquery(InventorySnapshot.objects.filter(pk=1).values("as_of")[:1]),
            last_error=Subquery(
                SyncRun.objects.filter(finished_at__isnull=False)
                .order_by("-started_at")
                .values("error")[:1]
            ),
        )
    )
    if not rows:
        freshness = get_freshness()
        stand_in = clusters.implicit()
        health = clusters.health(freshness.as_of, failing=bool(freshness.last_error), now=now)
        return [ClusterState(stand_in, health, freshness.as_of, freshness.last_error)]
    return [
        ClusterState(
            row,
            clusters.health(row.as_of, failing=bool(row.last_error), now=now)
            if row.enabled
            else clusters.Health.UNKNOWN,
            row.as_of if row.enabled else None,
            (row.last_error or "") if row.enabled else "",
        )
        for row in rows
    ]


def freshness_of(states: Iterable[ClusterState], *, now: datetime | None = None) -> Freshness:
    """get_freshness, from what cluster_states read (no query): the enabled cluster's mirror."""
    state = next((s for s in states if s.cluster.enabled), None)
    if state is None:
        return Freshness(as_of=None, stale=True)
    too_old = state.as_of is None or (now or timezone.now()) - state.as_of > timedelta(
        seconds=settings.INVENTORY_STALE_AFTER_SECONDS
    )
    return Freshness(
        as_of=state.as_of, stale=too_old or bool(state.last_error), last_error=state.last_error
    )


def availability_by_cluster(
    states: Iterable[ClusterState],
) -> dict[str, dict[str, PackageAvailability]]:
    """`{cluster name: {package id: its availability}}` for the enabled clusters (one query:
    until observation runs per cluster, the one mirror is the enabled cluster's)."""
    enabled = [s.cluster.name for s in states if s.cluster.enabled]
    if not enabled:
        return {}
    return {enabled[0]: list_package_availability()}


def placement_candidates(package_id: str, *, now: datetime | None = None) -> list[Candidate]:
    """The registered clusters as placement sees them for a unit of `package_id`: one query,
    and the package's availability only when there is a choice between clusters."""
    states = cluster_states(now=now)
    enabled = [s for s in states if s.cluster.enabled]
    by_cluster: dict[str, dict[str, PackageAvailability]] = {}
    if len(enabled) > 1:
        by_cluster = availability_by_cluster(states)
    return [
        Candidate(
            name=s.cluster.name,
            region=s.cluster.region,
            position=s.cluster.position,
            enabled=s.cluster.enabled,
            cordoned=s.cluster.cordoned,
            unreachable=s.health == clusters.Health.UNREACHABLE,
            placeable=row.placeable if (row := _row(by_cluster, s, package_id)) else 0,
            free_devices=row.free_devices if row else 0,
            known=row is not None,
        )
        for s in states
    ]


def _row(
    by_cluster: dict[str, dict[str, PackageAvailability]], state: ClusterState, package_id: str
) -> PackageAvailability | None:
    return by_cluster.get(state.cluster.name, {}).get(package_id)
