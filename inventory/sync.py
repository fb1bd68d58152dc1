"""sync_inventory: list a cluster's DRA state, diff it against that cluster's mirror in Python,
and apply the difference in one transaction with a fixed number of bulk statements."""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import orjson
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import connection, transaction
from django.db.models import Field, JSONField, Model
from django.utils import timezone
from psycopg.types.json import Jsonb

from catalog.models import Package
from controlplane import kube, locks, memory, metrics
from controlplane.kube.errors import KubeError
from inventory import observe
from inventory.models import (
    Claim,
    Device,
    DeviceClass,
    DevicePool,
    InventorySnapshot,
    Node,
    PackageAvailability,
    Quota,
    SyncRun,
)

logger = logging.getLogger(__name__)

# pg_try_advisory_lock(key, hashtext(cluster)): "one inventory sync of a cluster at a time"
# across every worker and observer; clusters sync side by side.
_LOCK_KEY = 0x1A7E_5C00


def _exclusive(cluster: str) -> AbstractContextManager[bool]:
    return locks.held(_LOCK_KEY, cluster)


def package_specs() -> list[observe.PackageSpec]:
    """What availability is computed for: each active package, and each alternative of a
    fallback package as a spec of its own (`<package>/<alternative>`)."""
    specs = []
    for p in Package.objects.filter(active=True):
        alternatives = list(p.alternatives or [])
        specs.append(
            observe.PackageSpec(
                id=p.id,
                device_class_name=p.device_class_name,
                selectors=tuple(p.selectors or ()),
                count=p.count,
                cpu_millicores=p.cpu_millicores,
                memory_bytes=p.memory_bytes,
                alternatives=tuple(f"{p.id}/{a['name']}" for a in alternatives),
                capacity=tuple(sorted((p.capacity or {}).items())),
                match_attribute=p.match_attribute,
            )
        )
        specs += [
            observe.PackageSpec(
                id=f"{p.id}/{a['name']}",
                device_class_name=a["deviceClassName"],
                selectors=tuple(a.get("selectors") or ()),
                count=a["count"],
                cpu_millicores=p.cpu_millicores,
                memory_bytes=p.memory_bytes,
                capacity=tuple(sorted((a.get("capacity") or {}).items())),
            )
            for a in alternatives
        ]
    return specs


# What the mirror is observed from, by the name observe() takes each under: the sync lists
# them, the observer (runtime/control/observer.py) watches them.
INVENTORY_KINDS: dict[str, kube.Kind] = {
    "nodes": kube.NODE,
    "device_classes": kube.DEVICECLASS,
    "slices": kube.RESOURCESLICE,
    "device_taint_rules": kube.DEVICETAINTRULE,
    "claims": kube.RESOURCECLAIM,
    "pods": kube.POD,
    "quotas": kube.RESOURCEQUOTA,
}


def fetch() -> dict[str, list[dict]]:
    """One list call per kind, cluster-wide, in the cluster `kube.using` names (DeviceTaintRules
    at the version the cluster serves them, none where it serves none)."""
    return {
        name: _list_if_served(kube.device_taint_rule_kind())
        if kind == kube.DEVICETAINTRULE
        else kube.list_objects(kind)
        for name, kind in INVENTORY_KINDS.items()
    }


def _list_if_served(kind: kube.Kind) -> list[dict]:
    """A kind only some clusters serve (an alpha API behind a gate): 404 means there are none."""
    try:
        return kube.list_objects(kind)
    except KubeError as exc:
        if exc.status == 404:
            return []
        raise


def _jsonb(value: Any) -> Jsonb:
    return Jsonb(value, orjson.dumps)


def _copy_adapter(field: Field) -> Callable[[Any], Any] | None:
    """How a value of `field` goes into COPY: JSON wrapped for jsonb, lists for arrays,
    everything else as the plain Python value psycopg already knows."""
    if isinstance(field, JSONField):
        return _jsonb
    if isinstance(field, ArrayField):
        return list
    return None


def _upsert(model: type[Model], key_fields: list[str], rows: list[dict], *, cluster: str) -> None:
    """Write `rows` (field name -> value; a missing field gets its default) with COPY into a
    temporary table and one INSERT ... ON CONFLICT DO UPDATE: the same statements at 10 or
    10,000 rows, and no per-row SQL rendering or model building (which made a cold sync at
    10,000 devices ten times the raw upsert). Every row is `cluster`'s."""
    quote = connection.ops.quote_name
    fields = [f for f in model._meta.concrete_fields if f.name != "id"]
    adapters = [(f.name, f.get_default(), _copy_adapter(f)) for f in fields]
    # A field is concrete because it has a column: the test only narrows the stubs' `str | None`.
    column_of = {f.name: f.column for f in fields if f.column is not None}
    columns = ", ".join(quote(column) for column in column_of.values())
    keys = {column_of[name] for name in ("cluster", *key_fields)}
    table = quote(model._meta.db_table)
    staging = quote(f"sync_{model._meta.db_table}")
    updates = ", ".join(
        f"{quote(column)} = EXCLUDED.{quote(column)}"
        for column in column_of.values()
        if column not in keys
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMPORARY TABLE {staging} ON COMMIT DROP AS "
            f"SELECT {columns} FROM {table} WITH NO DATA"
        )
        with cursor.cursor.copy(f"COPY {staging} ({columns}) FROM STDIN") as copy:
            for row in rows:
                values = []
                for name, default, adapt in adapters:
                    value = cluster if name == "cluster" else row.get(name, default)
                    values.append(adapt(value) if adapt else value)
                copy.write_row(values)
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {staging} "
            f"ON CONFLICT ({', '.join(quote(k) for k in sorted(keys))}) DO UPDATE SET {updates}"
        )


# A device's content hash is a digest of its whole published entry (inventory.observe): rows with
# the same hash have the same product, attributes, capacity and counters, so the diff compares
# the hash and does not read those back. They are most of the mirror's bytes: decoded, they were
# 39 of the 100 MB the observer's apply held at its peak at 10,000 devices.
_HASHED_DEVICE_FIELDS = ("product", "attributes", "capacity", "consumes_counters")


def _current(
    model: type[Model], key_fields: list[str], *, cluster: str, omit: tuple[str, ...] = ()
) -> dict[tuple, dict]:
    """`cluster`'s rows of `model` by key, every column but those in `omit` (and the cluster)."""
    value_fields = [
        f.name for f in model._meta.concrete_fields if f.name not in ("id", "cluster", *omit)
    ]
    return {
        tuple(row[k] for k in key_fields): row
        for row in model._default_manager.filter(cluster=cluster).values("id", *value_fields)
    }


def _apply(
    model: type[Model],
    key_fields: list[str],
    desired: dict[tuple, dict],
    current: dict[tuple, dict] | None = None,
    *,
    cluster: str,
) -> dict:
    """Upsert rows that differ and delete rows that vanished: a fixed number of statements.
    Runs inside the sync's transaction (the staging table lives until its commit). `current`
    is `cluster`'s mirror as already read by this sync (only the sync writes it: advisory
    lock); a field its rows leave out is not compared (a hash they hold stands for it)."""
    if current is None:
        current = _current(model, key_fields, cluster=cluster)
    changed = [
        values
        for key, values in desired.items()
        if (row := current.get(key)) is None
        or any(row[f] != value for f, value in values.items() if f in row)
    ]
    gone = [row["id"] for key, row in current.items() if key not in desired]
    if changed:
        _upsert(model, key_fields, changed, cluster=cluster)
    if gone:
        model._default_manager.filter(id__in=gone).delete()
    return {"changed": len(changed), "deleted": len(gone)}


def _keyed(rows: dict) -> dict[tuple, dict]:
    return {key if isinstance(key, tuple) else (key,): row for key, row in rows.items()}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """A sync builds hundreds of thousands of short-lived dicts and lists (decoded lists, rows,
    diffs), all acyclic and freed by reference counting; the cyclic collector would walk the
    growing heap again and again for nothing (40% of a warm sync at 10,000 devices). It is
    paused for the sync and runs again as usual afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def sync_inventory(cluster: str | None = None) -> SyncRun | None:
    """Mirror `cluster` (the process's own, CLUSTER_NAME, by default): beat's full sync, the
    backstop behind the observer. List every kind there, then apply. Returns the run, or None
    when another sync of that cluster holds the lock."""
    cluster = cluster or settings.CLUSTER_NAME
    with _collector_paused(), _exclusive(cluster) as acquired:
        if not acquired:
            return None
        started = time.perf_counter()
        run = SyncRun.objects.create(cluster=cluster, started_at=timezone.now())
        try:
            with kube.using(cluster):
                raw = fetch()
        except KubeError as exc:
            # Keep the previous mirror; the failed run makes it stale.
            run.error = f"cannot read the cluster: {exc}"
            run.finished_at = timezone.now()
            run.duration_ms = int((time.perf_counter() - started) * 1000)
            run.save(update_fields=["error", "finished_at", "duration_ms"])
            logger.warning("inventory sync failed: %s", exc)
            return run
        with metrics.INVENTORY_SYNC_SECONDS.labels("sync").time():
            _observe_and_apply(raw, cluster=cluster, run=run, started=started)
        return run


def apply_observed(raw: dict[str, list[dict]], *, cluster: str) -> dict | None:
    """Apply objects the caller already holds (the observer's informers on `cluster`: every
    node, device class, slice, device taint rule, claim, pod and quota) to that cluster's
    mirror, exactly as a sync would, without a SyncRun row. Returns what was applied, or None
    when a sync of that cluster holds the lock."""
    with _collector_paused(), _exclusive(cluster) as acquired:
        if not acquired:
            return None
        with metrics.INVENTORY_SYNC_SECONDS.labels("observer").time():
            applied = _observe_and_apply(raw, cluster=cluster)[2]
    # What the apply held for a moment (its observation, the mirror's rows, the document) is
    # freed: the pages the C heap kept of it go back to the system.
    memory.release()
    return applied


def touch_snapshot(cluster: str) -> None:
    """Mark `cluster`'s mirror current as of now: a caller that watches every kind there and
    saw nothing change says so (a mirror counts as stale when it is old)."""
    InventorySnapshot.objects.filter(cluster=cluster).update(as_of=timezone.now())


def _observe_and_apply(
    raw: dict[str, list[dict]],
    *,
    cluster: str,
    run: SyncRun | None = None,
    started: float | None = None,
) -> tuple[observe.Observation, dict, dict]:
    """The pure observation of `raw` (`cluster`'s objects), applied to that cluster's mirror in
    one transaction with a fixed number of statements; `run`, when given, records it."""
    packages = package_specs()
    # Read the device mirror once: it feeds both CEL reuse and the diff below.
    devices_now = _current(
        Device, ["driver", "pool", "name"], cluster=cluster, omit=_HASHED_DEVICE_FIELDS
    )
    previous = {
        key: (row["content_hash"], row["device_classes"], row["packages"])
        for key, row in devices_now.items()
    }
    observation = observe.observe(**raw, packages=packages, previous_membership=previous)
    document = observe.build_document(observation)
    availability = observe.package_availability(observation, packages)
    with transaction.atomic():
        applied = {
            "nodes": _apply(Node, ["name"], _keyed(observation.nodes), cluster=cluster),
            "deviceClasses": _apply(
                DeviceClass, ["name"], _keyed(observation.classes), cluster=cluster
            ),
            "pools": _apply(DevicePool, ["driver", "name"], observation.pools, cluster=cluster),
            "devices": _apply(
                Device,
                ["driver", "pool", "name"],
                observation.devices,
                devices_now,
                cluster=cluster,
            ),
            "claims": _apply(Claim, ["namespace", "name"], observation.claims, cluster=cluster),
            "quotas": _apply(Quota, ["namespace", "name"], observation.quotas, cluster=cluster),
            "packages": _apply(
                PackageAvailability,
                ["package_id"],
                {(pid,): {"package_id": pid, **row} for pid, row in availability.items()},
                cluster=cluster,
            ),
        }
        now = timezone.now()
        InventorySnapshot.objects.update_or_create(
            cluster=cluster, defaults={"as_of": now, "document": json.dumps(document)}
        )
        if run is not None:
            run.finished_at = now
            run.duration_ms = int((time.perf_counter() - (started or 0.0)) * 1000)
            run.total_devices = document["totalGpuAllocatable"]
            run.allocated_devices = sum(
                1 for d in observation.devices.values() if d["pool_complete"] and d["allocated"]
            )
            run.counts = {
                "nodes": len(observation.nodes),
                "slices": observation.slice_count,
                "devices": len(observation.devices),
                "claims": len(observation.claims),
                "celEvaluated": observation.evaluated_devices,
                "applied": applied,
            }
            run.save()
    return observation, document, applied
