"""The observer: watches the cluster and brings units and the inventory mirror up to date
within a fraction of a second (ARCHITECTURE §13).

It is a thin shell around what beat's backstop already does: every event marks the unit it
concerns (or the inventory) dirty; a loop takes the dirty units in batches a few milliseconds
wide and hands them to the one reconcile (runtime/control/reconcile.py `reconcile_batch`) with their
objects from the informers' memory instead of cluster-wide lists, and it applies the
informers' view of slices, claims, pods, nodes and quotas to the inventory mirror through the
sync's own apply path. What one event costs does not depend on how many units exist. The
informers keep only the fields the controller reads of each object (controlplane/kube/trim.py).

Four small parts: `Observer` (one cluster's watch loop), `Lead` (several replicas may run:
for each cluster, the one holding a PostgreSQL advisory lock leads, the others wait for it),
`StatusBoard` (what health reads) and `Fleet` (an observer per enabled cluster, each on a
thread of its own, as the registry changes: ARCHITECTURE §20). A dead observer costs latency
only; the backstop catches up.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg
import redis
from django.conf import settings
from django.db import close_old_connections, connection

from controlplane import kube, memory, metrics
from controlplane.kube import trim
from controlplane.kube.watch import Event, Informer, Key
from inventory import sync
from runtime import manifests, selectors
from runtime.control import metering, reconcile
from runtime.models import GPUUnit, UnitPhase

logger = logging.getLogger(__name__)

# pg_try_advisory_lock(LEAD_KEY, hashtext(cluster)): the lead of a cluster's observer (the
# inventory sync's key is 0x1A7E_5C00).
LEAD_KEY = 0x0B5E_77E0
# The most units one batch takes: after a relist every unit is dirty, and loading them all at
# once (rows, tenants, objects) held 55 MB for a moment at 10,000 units, which the process
# then kept. A full batch is a burst: what the C heap kept of it goes back (memory.release).
BATCH_UNITS = 500
INVENTORY_KINDS = sync.INVENTORY_KINDS
# By plural: DeviceTaintRule is watched at whichever version the cluster serves it.
INVENTORY_PLURALS = {kind.plural for kind in INVENTORY_KINDS.values()}


class Lead:
    """The lead of a cluster's observer: a PostgreSQL advisory lock held on a connection of its
    own. One replica holds it; the others try again now and then. The lock goes with the
    session, so a replica that dies (or loses its connection) gives it up."""

    def __init__(self, identity: str, cluster: str) -> None:
        self.identity = identity
        self.cluster = cluster
        self.held = threading.Event()
        self.connection: psycopg.Connection | None = None

    def hold(self) -> bool:
        """Whether this process holds the lead, taking it when it is free."""
        if self.connection is not None:
            try:
                self.connection.execute("SELECT 1")
                return True
            except psycopg.Error:
                logger.warning("observer lost its lead connection; stepping down")
                # Not leading first: whoever sees the connection gone must not see it leading.
                self._set(held=False)
                self.connection = None
                return False
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        # The lock lives as long as this session: a peer that vanished must end it in seconds
        # (keepalives, a TCP user timeout), not when the kernel gives up hours later.
        params.update(
            connect_timeout=5,
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            tcp_user_timeout=20_000,
        )
        try:
            lead = psycopg.connect(**params, autocommit=True)
        except psycopg.Error:
            logger.warning("observer cannot reach the database", exc_info=True)
            return False
        row = lead.execute(
            "SELECT pg_try_advisory_lock(%s, hashtext(%s))", [LEAD_KEY, self.cluster]
        ).fetchone()
        if row is not None and row[0]:
            self.connection = lead
            self._set(held=True)
            logger.info("observer %s holds the lead of %s", self.identity, self.cluster)
            return True
        lead.close()
        return False

    def release(self) -> None:
        if self.connection is not None:
            self.connection.close()  # the advisory lock goes with the session
            self.connection = None
        self._set(held=False)

    def _set(self, *, held: bool) -> None:
        if held:
            self.held.set()
        else:
            self.held.clear()
        metrics.OBSERVER_LEADING.labels(self.cluster).set(1 if held else 0)


class StatusBoard:
    """Where a cluster's leading observer says how it is, for health (/api/v1/health): a
    Redis key per cluster with a short TTL, so a dead observer's status expires by itself."""

    PREFIX = "controlplane:observer:"

    def __init__(self, cluster: str) -> None:
        self.key = f"{self.PREFIX}{cluster}"

    def publish(self, status: dict, *, stopping: bool = False) -> None:
        if not (status["leading"] or stopping):
            return
        try:
            _redis().set(self.key, json.dumps(status), ex=settings.OBSERVER_STATUS_TTL_SECONDS)
        except redis.RedisError:
            logger.debug("observer status not published", exc_info=True)

    @classmethod
    def read_all(cls) -> dict[str, dict]:
        """Every cluster's lead observer's last published status, by cluster."""
        try:
            client = _redis()
            keys = list(client.scan_iter(match=f"{cls.PREFIX}*", count=100))
            values = client.mget(keys) if keys else []
        except redis.RedisError:
            return {}
        return {
            key.decode().removeprefix(cls.PREFIX): json.loads(value)
            for key, value in zip(keys, values, strict=True)
            if value
        }

    def read(self) -> dict | None:
        """The lead observer's last published status, or None when none is running."""
        try:
            raw = _redis().get(self.key)
        except redis.RedisError:
            return None
        return json.loads(raw) if raw else None


@dataclass
class Stats:
    """What the observer has done, for health, metrics and tests."""

    events: int = 0
    batches: int = 0
    units_reconciled: int = 0
    inventory_applies: int = 0
    last_event_at: float = 0.0
    last_lag: float = 0.0  # seconds from an event's arrival to its batch committed
    requeued: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class Observer:
    """Informers on the seven kinds in one cluster (the process's own by default), a dirty set
    fed by their events, and the loop that works it off. `run()` blocks until `stop()`."""

    def __init__(
        self,
        *,
        batch_seconds: float | None = None,
        inventory_seconds: float | None = None,
        cluster: str | None = None,
    ) -> None:
        self.cluster = cluster or settings.CLUSTER_NAME
        self.batch_seconds = (
            settings.OBSERVER_BATCH_SECONDS if batch_seconds is None else batch_seconds
        )
        self.inventory_seconds = (
            settings.OBSERVER_INVENTORY_SECONDS if inventory_seconds is None else inventory_seconds
        )
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self.stats = Stats()
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._dirty_units: dict[Key, float] = {}  # unit key -> when its first event arrived
        self._retry: dict[Key, tuple[float, float]] = {}  # unit key -> (not before, delay)
        self._inventory_dirty_since = 0.0
        self._last_inventory = 0.0
        self._last_touch = 0.0
        self._last_status = 0.0
        self._generations: dict[Key, tuple] = {}
        self._gone_pods: dict[Key, dict] = {}  # unit key -> its pod as it was deleted
        self._blind = False  # the unit kinds' watches were not all up at the last step
        self.informers: dict[kube.Kind, Informer] = {}
        self.lead = Lead(self.identity, self.cluster)
        self.leading = self.lead.held  # set while this replica leads
        self.status_board = StatusBoard(self.cluster)

    # ------------------------------------------------------------------ events (informer threads)

    def replaced(self, kind: kube.Kind, objects: dict[Key, dict]) -> None:
        """A (re)list: anything may have changed, so every unit it shows is looked at again."""
        now = time.monotonic()
        keys = [key for obj in objects.values() if (key := self._unit_key(kind, obj))]
        with self._wake:
            for key in keys:
                self._dirty_units.setdefault(key, now)
            if kind.plural in INVENTORY_PLURALS:
                self._inventory_dirty_since = self._inventory_dirty_since or now
            self._wake.notify()

    def changed(self, kind: kube.Kind, event: Event) -> None:
        now = time.monotonic()
        metrics.OBSERVER_EVENTS.labels(kind.plural).inc()
        key = self._unit_key(kind, event.object)
        with self._wake:  # seven informer threads call this
            self.stats.events += 1
            self.stats.last_event_at = time.time()
            self.stats.by_kind[kind.plural] = self.stats.by_kind.get(kind.plural, 0) + 1
            if key and kind == kube.GPUUNIT and not self._gpuunit_changed(key, event):
                key = None  # our own status write coming back: nothing to reconcile
            if key:
                self._dirty_units.setdefault(key, now)
                if kind == kube.POD and event.type == "DELETED":
                    # Why it went (an eviction for a device taint) is only on its last state.
                    self._gone_pods[key] = event.object
            if kind.plural in INVENTORY_PLURALS:
                self._inventory_dirty_since = self._inventory_dirty_since or now
            self._wake.notify()

    @staticmethod
    def _unit_key(kind: kube.Kind, obj: dict) -> Key | None:
        metadata = obj.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if labels.get(manifests.LABEL_MANAGED_BY) != manifests.MANAGED_BY:
            return None
        name = metadata.get("name") if kind == kube.GPUUNIT else labels.get(manifests.LABEL_UNIT)
        if kind not in reconcile.UNIT_KINDS or not name:
            return None
        return metadata.get("namespace") or "", name

    def _gpuunit_changed(self, key: Key, event: Event) -> bool:
        """Whether a GPUUnit event is more than a status write (which moves no generation)."""
        metadata = event.object.get("metadata") or {}
        seen = (metadata.get("uid"), metadata.get("generation"), metadata.get("deletionTimestamp"))
        if event.type == "DELETED":
            self._generations.pop(key, None)
            return True
        previous = self._generations.get(key)
        self._generations[key] = seen
        return previous != seen

    # ------------------------------------------------------------------ lifecycle

    def start_informers(self) -> None:
        informers = {
            kind: Informer(
                kube.device_taint_rule_kind() if kind == kube.DEVICETAINTRULE else kind,
                self,
                label_selector=manifests.OURS_SELECTOR if kind == kube.GPUUNIT else "",
                timeout_seconds=settings.OBSERVER_WATCH_TIMEOUT_SECONDS,
                # Alpha on 1.34-1.35: many clusters do not serve it, and then have no rules.
                optional=kind == kube.DEVICETAINTRULE,
                transform=trim.TRANSFORMS.get(kind.plural),
            )
            for kind in (kube.GPUUNIT, *INVENTORY_KINDS.values())
        }
        self.informers = informers  # all seven at once: synced() never sees a part of them
        for informer in informers.values():
            informer.start()

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify()

    def run(self) -> None:
        """Wait for the lead, then work events off until stopped: every call (the informers'
        threads', the reconciles') goes to this observer's cluster."""
        with kube.using(self.cluster):
            self._run()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self.lead.hold():
                    if self.informers:  # it lost the lead: another replica watches now
                        self._stop_informers()
                    self._publish_status()
                    self._stop.wait(settings.OBSERVER_LEAD_RETRY_SECONDS)
                    continue
                if not self.informers:
                    self.start_informers()
                try:
                    self._step()
                except Exception:  # a database blip, say: the observer goes on after it
                    logger.exception("observer step failed; going on")
                    close_old_connections()
                    self._stop.wait(1.0)
        finally:
            was_leading = self.leading.is_set()
            self._stop_informers()
            self.lead.release()
            if was_leading:
                self._publish_status(stopping=True)

    def synced(self) -> bool:
        """Every informer listed and watching: what they hold is the cluster as of now."""
        return bool(self.informers) and all(i.healthy for i in self.informers.values())

    def _units_observable(self) -> bool:
        """The kinds a unit is reconciled from are listed and watching: an object missing
        from them is missing from the cluster, not just not seen yet."""
        return all(
            (informer := self.informers.get(kind)) is not None and informer.healthy
            for kind in reconcile.UNIT_KINDS
        )

    def _stop_informers(self) -> None:
        for informer in self.informers.values():
            informer.stop()
        self.informers = {}

    # ------------------------------------------------------------------ the loop

    def _step(self) -> None:
        with self._wake:
            self._wake.wait_for(self._has_work, timeout=self._next_wake())
        if self._stop.is_set():
            return
        # Under a burst more events arrive within milliseconds: take them in the same batch.
        if self.batch_seconds:
            time.sleep(self.batch_seconds)
        close_old_connections()
        now = time.monotonic()
        due: dict[Key, float] = {}
        observable = self._units_observable()
        if observable and self._blind:
            # Back from a gap (an outage, a failing watch): a watch resumed where it broke
            # brings only what changed since, and units whose rows changed meanwhile (marked
            # ClusterUnreachable) need a look too: every unit the cluster holds, once.
            self._blind = False
            self.replaced(kube.GPUUNIT, self._objects(kube.GPUUNIT))
        elif not observable and self.informers:
            self._blind = True
        if observable:
            with self._wake:  # the first to arrive first; the rest on the next steps
                due = dict(itertools.islice(self._dirty_units.items(), BATCH_UNITS))
                for key in due:
                    del self._dirty_units[key]
            for key, (not_before, _delay) in list(self._retry.items()):
                if not_before <= now and key not in due:
                    due[key] = now
        if due:
            try:
                self._reconcile_batch(due)
            except Exception:
                with self._wake:  # look at them again on the next step
                    for key, at in due.items():
                        self._dirty_units.setdefault(key, at)
                raise
            if len(due) >= BATCH_UNITS:
                memory.release()
        if self._inventory_due(now):
            self._apply_inventory()
        elif self.synced() and now - self._last_touch > settings.OBSERVER_TOUCH_SECONDS:
            # Nothing changed, and the watches say so: the mirror is current as of now.
            sync.touch_snapshot(self.cluster)
            self._last_touch = now
        self._publish_status()

    def _has_work(self) -> bool:
        return (
            self._stop.is_set()
            or (bool(self._dirty_units) and self._units_observable())
            or self._inventory_due(time.monotonic())
        )

    def _next_wake(self) -> float:
        now = time.monotonic()
        waits = [settings.OBSERVER_STATUS_SECONDS]
        waits += [not_before - now for not_before, _ in self._retry.values()]
        if self._inventory_dirty_since:
            waits.append(self._last_inventory + self.inventory_seconds - now)
        return max(0.0, min(waits))

    def _inventory_due(self, now: float) -> bool:
        return (
            bool(self._inventory_dirty_since)
            and (now - self._last_inventory >= self.inventory_seconds)
            and self.synced()
        )

    def _objects(self, kind: kube.Kind) -> dict[Key, dict]:
        informer = self.informers.get(kind)
        return informer.snapshot() if informer else {}

    def _object(self, kind: kube.Kind, key: Key) -> dict | None:
        informer = self.informers.get(kind)
        return informer.get(key) if informer else None

    def _reconcile_batch(self, due: dict[Key, float]) -> None:
        """One batch: the units loaded in one query, then the one reconcile
        (runtime/control/reconcile.py) over them with their objects from the watch caches."""
        units = selectors.list_live_units_by_key(due, cluster=self.cluster)
        seen = {(unit.namespace, unit.name) for unit in units}
        ended_pods = []
        for key in due:
            if key not in seen:
                self._retry.pop(key, None)  # no live unit of that name: nothing to do
                with self._wake:
                    if (pod := self._gone_pods.pop(key, None)) is not None:
                        ended_pods.append(pod)
        ready = []
        for unit in units:
            key = (unit.namespace, unit.name)
            if (not unit.unit_k8s_uid and unit.phase != UnitPhase.TERMINATING) or unit.rolling_out:
                # Its provisioning (or a stop, start, restart, update) has not recorded what
                # it did yet: look again once it has, the events may all be in by then.
                self._requeue(key)
                if not unit.rolling_out:
                    continue
            else:
                self._retry.pop(key, None)
            ready.append(unit)
        with self._wake:
            last_pods = {key: self._gone_pods.pop(key) for key in seen if key in self._gone_pods}
        # Billed until the devices were released, as the pods' last states say, whatever
        # their units have become (one Terminated already has no reconcile).
        metering.close_meters_of_gone_pods([*last_pods.values(), *ended_pods])
        result = reconcile.reconcile_batch(ready, lambda unit: self._unit_objects(unit, last_pods))
        for key in result.retry:
            self._requeue(key)
        self.stats.batches += 1
        self.stats.units_reconciled += len(ready)
        if due:
            self.stats.last_lag = time.monotonic() - min(due.values())
            metrics.OBSERVER_LAG_SECONDS.observe(self.stats.last_lag)

    def _unit_objects(self, unit: GPUUnit, last_pods: dict[Key, dict]) -> reconcile.UnitObjects:
        key = (unit.namespace, unit.name)
        return reconcile.UnitObjects(
            gpuunit=self._object(kube.GPUUNIT, key),
            claim=self._object(kube.RESOURCECLAIM, (unit.namespace, unit.claim_name)),
            pod=self._object(kube.POD, (unit.namespace, manifests.pod_name_for(unit.name))),
            last_pod=last_pods.get(key),
        )

    def _requeue(self, key: Key) -> None:
        """Look at a unit again shortly: its objects are there, its row not yet."""
        _not_before, delay = self._retry.get(key, (0.0, 0.025))
        if delay > settings.OBSERVER_RETRY_GIVE_UP_SECONDS:
            self._retry.pop(key, None)  # the backstop has it from here
            return
        self._retry[key] = (time.monotonic() + delay, delay * 2)
        self.stats.requeued += 1

    def _apply_inventory(self) -> None:
        with self._wake:  # a change from now on marks it dirty again
            self._inventory_dirty_since = 0.0
        raw = {name: list(self._objects(kind).values()) for name, kind in INVENTORY_KINDS.items()}
        self._last_inventory = time.monotonic()
        if sync.apply_observed(raw, cluster=self.cluster) is None:
            # The backstop sync holds the lock and writes the same: come back after it.
            with self._wake:
                self._inventory_dirty_since = self._inventory_dirty_since or time.monotonic()
            return
        self._last_touch = self._last_inventory
        self.stats.inventory_applies += 1

    # ------------------------------------------------------------------ status for health

    def _publish_status(self, *, stopping: bool = False) -> None:
        now = time.monotonic()
        if not stopping and now - self._last_status < settings.OBSERVER_STATUS_SECONDS:
            return
        self._last_status = now
        status = {
            "identity": self.identity,
            "cluster": self.cluster,
            "leading": self.leading.is_set() and not stopping,
            "synced": self.synced(),
            "lastEventAt": (
                datetime.fromtimestamp(self.stats.last_event_at, UTC).isoformat()
                if self.stats.last_event_at
                else None
            ),
            "lagSeconds": round(self.stats.last_lag, 4),
            "events": self.stats.events,
            "updatedAt": datetime.now(UTC).isoformat(),
        }
        self.status_board.publish(status, stopping=stopping)


def _redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.CELERY_BROKER_URL, socket_connect_timeout=1, socket_timeout=1
    )


def read_status(cluster: str | None = None) -> dict | None:
    """The last published status of `cluster`'s lead observer (the process's own cluster's by
    default), or None when none is running."""
    return StatusBoard(cluster or settings.CLUSTER_NAME).read()


class Fleet:
    """An Observer per enabled cluster, each on a thread of its own: the registry is read
    again every OBSERVER_LEAD_RETRY_SECONDS, so a cluster enabled later is watched and one
    disabled is let go. `run()` blocks until `stop()`."""

    def __init__(self, clusters: Callable[[], list[str]]) -> None:
        self.clusters = clusters
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self.observers: dict[str, tuple[Observer, threading.Thread]] = {}
        self._stop = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    wanted = set(self.clusters())
                except Exception:  # the database away: keep what runs, look again
                    logger.warning("observer cannot read the cluster registry", exc_info=True)
                    close_old_connections()
                else:
                    self._converge(wanted)
                self._stop.wait(settings.OBSERVER_LEAD_RETRY_SECONDS)
        finally:
            self._converge(set())

    def stop(self) -> None:
        self._stop.set()

    def _converge(self, wanted: set[str]) -> None:
        for name in sorted(set(self.observers) - wanted):
            observer, thread = self.observers.pop(name)
            observer.stop()
            thread.join()
            logger.info("observer of %s stopped", name)
        for name in sorted(wanted - set(self.observers)):
            observer = Observer(cluster=name)
            thread = threading.Thread(
                target=_run_then_close, args=(observer,), name=f"observer-{name}", daemon=True
            )
            self.observers[name] = (observer, thread)
            thread.start()
            logger.info("observer of %s started", name)


def _run_then_close(observer: Observer) -> None:
    try:
        observer.run()
    finally:
        connection.close()  # this thread's own database connection


def check_observer() -> dict:
    """The observer's part of /api/v1/health (Redis only: it runs beside the request's
    thread): for the process's own cluster and every other cluster whose observer has said
    how it is, a replica leads, its watches are listed, when it last saw an event and how long
    its last batch took from event to commit. The own cluster's figures are at the top (as
    before there were several); `clusters` has each's."""
    statuses = StatusBoard.read_all()
    each = {name: _check(statuses.get(name)) for name in sorted({settings.CLUSTER_NAME, *statuses})}
    return {
        **each[settings.CLUSTER_NAME],
        "ok": all(c["ok"] for c in each.values()),
        "clusters": each,
    }


def _check(status: dict | None) -> dict:
    if status is None:
        return {"ok": False, "error": "no observer holds the lead"}
    return {
        "ok": bool(status.get("leading") and status.get("synced")),
        "leader": status.get("identity"),
        "lastEvent": status.get("lastEventAt"),
        "lagSeconds": status.get("lagSeconds"),
    }
