"""Inventory reads, all served from the mirror (never from the cluster)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Func, JSONField, Min, OuterRef, QuerySet, Subquery, Sum
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Cast
from django.utils import timezone

from inventory import clusters
from inventory.models import (
    Cluster,
    Device,
    InventorySnapshot,
    Node,
    PackageAvailability,
    SyncRun,
)
from inventory.observe import Observation, attribute_value, build_document
from inventory.placement import Candidate


@dataclass(frozen=True)
class Freshness:
    as_of: datetime | None
    stale: bool
    last_error: str = ""


def get_freshness(cluster: str | None = None) -> Freshness:
    """When `cluster`'s mirror (the process's own cluster's by default) was last refreshed, and
    whether to distrust it (last sync failed, or none succeeded recently)."""
    cluster = cluster or settings.CLUSTER_NAME
    latest = (
        SyncRun.objects.filter(cluster=cluster, finished_at__isnull=False)
        .order_by("-started_at")
        .first()
    )
    as_of = (
        InventorySnapshot.objects.filter(cluster=cluster).values_list("as_of", flat=True).first()
    )
    too_old = as_of is None or timezone.now() - as_of > timedelta(
        seconds=settings.INVENTORY_STALE_AFTER_SECONDS
    )
    last_error = latest.error if latest is not None else ""
    return Freshness(as_of=as_of, stale=too_old or bool(last_error), last_error=last_error)


# The stored document this process served last per cluster, by its snapshot's as_of: it only
# changes with a sync, and reading it (600 KB at 10,000 devices, decompressed by PostgreSQL) and
# encoding it cost more than everything else the endpoint does.
_served: dict[str, tuple[datetime, bytes]] = {}


def _stored_document(cluster: str, as_of: datetime | None) -> bytes:
    served = _served.get(cluster)
    if served is not None and served[0] == as_of:
        return served[1]
    row = InventorySnapshot.objects.filter(cluster=cluster).values_list("as_of", "document").first()
    if row is None:
        return json.dumps(build_document(Observation())).encode()
    _served[cluster] = (row[0], row[1].encode())
    return _served[cluster][1]


def get_inventory_document(cluster: str | None = None) -> bytes:
    """`{"data": {"cluster": ..., "asOf": ..., "stale": ..., <stored document>}}` as JSON bytes,
    for `cluster` (the process's own cluster by default). The stored document is spliced in as
    bytes rather than parsed and re-serialised, and read from the database only when a sync
    replaced it, so this costs about the same whatever the cluster's size. Before the first
    sync it is an empty inventory, stale."""
    cluster = cluster or settings.CLUSTER_NAME
    freshness = get_freshness(cluster)
    document = _stored_document(cluster, freshness.as_of)
    head = json.dumps(
        {
            "cluster": cluster,
            "asOf": freshness.as_of.isoformat() if freshness.as_of else None,
            "stale": freshness.stale,
        }
    ).encode()
    if document == b"{}":
        return b'{"data": ' + head + b"}"
    return b'{"data": ' + head[:-1] + b", " + document[1:] + b"}"


@dataclass(frozen=True)
class Availability:
    """What the mirror says of a package: units that fit now, free devices it could use, and
    why nothing fits (summed over clusters where it is more than one's)."""

    placeable: int
    free_devices: int
    reason: str = ""


def list_package_availability(cluster: str | None = None) -> dict[str, Availability]:
    """`{package id: its availability}` in `cluster`, or summed over every cluster's mirror
    (one query either way)."""
    rows = PackageAvailability.objects.all()
    if cluster is not None:
        rows = rows.filter(cluster=cluster)
    return {
        row["package_id"]: Availability(row["placeable"], row["free"], row["why"])
        for row in rows.order_by()
        .values("package_id")
        .annotate(placeable=Sum("placeable"), free=Sum("free_devices"), why=Min("reason"))
    }


DeviceKey = tuple[str, str, str]  # (driver, pool, device)


def product_names() -> dict[str, str]:
    """Each device class's devices' product name as the clusters publish it ("NVIDIA H100
    80GB HBM3"), for people who do not read class names; the first in name order where a class
    has several. One statement."""
    names: dict[str, str] = {}
    rows = (
        Device.objects.exclude(product="")
        .annotate(device_class=Func(F("device_classes"), function="unnest"))
        .values_list("device_class", "product")
        .distinct()
        .order_by("device_class", "product")
    )
    for device_class, product in rows:
        names.setdefault(device_class, product)
    return names


def device_uuids(devices: Iterable[DeviceKey], *, cluster: str) -> dict[DeviceKey, str]:
    """The `uuid` attribute (in each device's own driver's domain, as NVIDIA's and the example
    driver publish it) of those of `cluster`'s `devices` that have one, by (driver, pool,
    device). One query."""
    wanted = set(devices)
    if not wanted:
        return {}
    rows = Device.objects.filter(
        cluster=cluster,
        driver__in={d for d, _p, _n in wanted},
        pool__in={p for _d, p, _n in wanted},
        name__in={n for _d, _p, n in wanted},
    ).values_list("driver", "pool", "name", "attributes")
    found = {}
    for driver, pool, name, attributes in rows:
        value = attribute_value({"driver": driver, "attributes": attributes}, f"{driver}/uuid")
        if (driver, pool, name) in wanted and isinstance(value, str) and value:
            found[(driver, pool, name)] = value
    return found


def unready_nodes(names: Iterable[str], *, cluster: str) -> set[str]:
    """Those of `cluster`'s nodes named that the mirror says are not Ready. One query for any
    number of names (none for none)."""
    wanted = {name for name in names if name}
    if not wanted:
        return set()
    return set(
        Node.objects.filter(cluster=cluster, name__in=wanted, ready=False).values_list(
            "name", flat=True
        )
    )


def device_taints(devices: Iterable[DeviceKey], *, cluster: str) -> dict[DeviceKey, list[dict]]:
    """The mirrored taints of those of `cluster`'s `devices` that have any, by (driver, pool,
    device): `[{"key", "value", "effect", "source"}]`, the slice's own first, then the
    DeviceTaintRules' (source `ResourceSlice/<name>` or `DeviceTaintRule/<name>`). One query
    for any number of devices (none for none)."""
    wanted = set(devices)
    if not wanted:
        return {}
    rows = (
        Device.objects.filter(
            cluster=cluster,
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
    """The last syncs' `sharedDevices` (the operator inventory's), each cluster's in its
    order, with `cluster` added: one statement, PostgreSQL picking them out of the stored
    documents (the device rows do not say which devices allow multiple allocations, nor what
    their shares consume)."""
    documents = (
        InventorySnapshot.objects.order_by("cluster")
        .annotate(inventory=Cast("document", JSONField()))
        .values_list("cluster", KeyTransform("sharedDevices", "inventory"))
    )
    return [
        {**device, "cluster": cluster} for cluster, shared in documents for device in shared or []
    ]


@dataclass(frozen=True)
class ClusterState:
    cluster: Cluster
    health: str  # clusters.Health
    as_of: datetime | None
    last_error: str = ""

    @property
    def takes_units(self) -> bool:
        return not self.cluster.cordoned and self.health != clusters.Health.UNREACHABLE


def _with_mirror() -> QuerySet[Any]:
    """The registered clusters, each with its mirror's as-of and its last finished sync's
    error (subqueries: one query)."""
    return Cluster.objects.annotate(
        as_of=Subquery(
            InventorySnapshot.objects.filter(cluster=OuterRef("name")).values("as_of")[:1]
        ),
        last_error=Subquery(
            SyncRun.objects.filter(cluster=OuterRef("name"), finished_at__isnull=False)
            .order_by("-started_at")
            .values("error")[:1]
        ),
    )


def _health(enabled: bool, as_of: datetime | None, last_error: str | None, now: datetime) -> str:
    """A registered cluster's health (a disabled one is not reached, so it is unknown)."""
    if not enabled:
        return clusters.Health.UNKNOWN
    return clusters.health(as_of, failing=bool(last_error), now=now)


def _implicit_state(now: datetime) -> ClusterState:
    """While no cluster is registered: the process's own, from its mirror."""
    freshness = get_freshness()
    stand_in = clusters.implicit()
    health = clusters.health(freshness.as_of, failing=bool(freshness.last_error), now=now)
    return ClusterState(stand_in, health, freshness.as_of, freshness.last_error)


def cluster_states(*, now: datetime | None = None) -> list[ClusterState]:
    """Every registered cluster with its health, in placement order, in one query. A disabled
    cluster's health is unknown (it is not reached)."""
    now = now or timezone.now()
    rows = list(_with_mirror())
    if not rows:
        return [_implicit_state(now)]
    return [
        ClusterState(
            row,
            _health(row.enabled, row.as_of, row.last_error, now),
            row.as_of if row.enabled else None,
            (row.last_error or "") if row.enabled else "",
        )
        for row in rows
    ]


def freshness_of(states: Iterable[ClusterState], *, now: datetime | None = None) -> Freshness:
    """get_freshness over the enabled clusters, from what cluster_states read (no query): as of
    the oldest of their mirrors, stale when any of them is (a cluster that is unreachable
    makes what is shown of it stale, not the others' figures wrong)."""
    enabled = [s for s in states if s.cluster.enabled]
    if not enabled:
        return Freshness(as_of=None, stale=True)
    now = now or timezone.now()
    limit = timedelta(seconds=settings.INVENTORY_STALE_AFTER_SECONDS)
    dated = [s.as_of for s in enabled if s.as_of is not None]
    errors = [s.last_error for s in enabled if s.last_error]
    stale = len(dated) < len(enabled) or any(now - at > limit for at in dated) or bool(errors)
    return Freshness(as_of=min(dated, default=None), stale=stale, last_error="; ".join(errors))


def availability_by_cluster(
    states: Iterable[ClusterState],
) -> dict[str, dict[str, PackageAvailability]]:
    """`{cluster name: {package id: its availability}}` for the enabled clusters, in one
    query."""
    return _availability([s.cluster.name for s in states if s.cluster.enabled])


def _availability(names: list[str]) -> dict[str, dict[str, PackageAvailability]]:
    if not names:
        return {}
    by_cluster: dict[str, dict[str, PackageAvailability]] = {name: {} for name in names}
    for row in PackageAvailability.objects.filter(cluster__in=names):
        by_cluster[row.cluster][row.package_id] = row
    return by_cluster


# What placement reads of each cluster, as values and from a query built once: building and
# filling model rows was most of a create's placement cost.
_FOR_PLACEMENT = _with_mirror().values_list(
    "name", "region", "position", "enabled", "cordoned", "as_of", "last_error"
)


def placement_candidates(package_id: str, *, now: datetime | None = None) -> list[Candidate]:
    """The registered clusters as placement sees them for a unit of `package_id`: one query,
    and the package's availability only when there is a choice between clusters."""
    now = now or timezone.now()
    rows = list(_FOR_PLACEMENT.all())
    if not rows:
        state = _implicit_state(now)
        own = state.cluster
        rows = [(own.name, own.region, own.position, True, False, state.as_of, state.last_error)]
    by_cluster: dict[str, dict[str, PackageAvailability]] = {}
    enabled = [row[0] for row in rows if row[3]]
    if len(enabled) > 1:
        by_cluster = _availability(enabled)
    candidates = []
    for name, region, position, is_enabled, cordoned, as_of, last_error in rows:
        row = by_cluster.get(name, {}).get(package_id)
        health = _health(is_enabled, as_of, last_error, now)
        candidates.append(
            Candidate(
                name=name,
                region=region,
                position=position,
                enabled=is_enabled,
                cordoned=cordoned,
                unreachable=health == clusters.Health.UNREACHABLE,
                placeable=row.placeable if row else 0,
                free_devices=row.free_devices if row else 0,
                known=row is not None,
            )
        )
    return candidates
