"""The one reconcile of units against their GPUUnit, claim and pod as observed (ARCHITECTURE
§17), used by the observer for the units an event touched (objects from its watch caches) and
by beat's backstop for every unit (objects from one list call per kind).

Two pure steps decide, per unit, from its row and its objects: `plan_pod` (create its pod
again, remove a stray one, or leave it) and `plan_row` (Terminated, Failed, or the phase,
reason and DRA status runtime/control/status.py derives). `reconcile_batch` carries a batch out: the
pod steps (cluster calls), every row in one transaction (a savepoint each; units that end each
in their own), then the GPUUnit statuses (cluster calls). A permanent cluster error fails the
unit with its reason; a temporary one leaves it for the next look (`ReconcileResult.retry`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from controlplane import kube, metrics
from controlplane.kube.errors import KubeError, TemporaryError
from inventory import selectors as inventory_selectors
from runtime import access, lifecycle, manifests, selectors
from runtime.control import metering, provisioning
from runtime.control.status import holds_idle, observe
from runtime.models import EventType, GPUUnit, RunPolicy, UnitPhase

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
DeviceKey = tuple[str, str, str]  # (driver, pool, device)

# An on-demand unit's reason while interruptible units give way for it (control/preemption).
WAITING_FOR_PREEMPTION = "WaitingForPreemption"
_HEALTHY_REASONS = {
    "Running",
    "Starting",
    "WaitingForAllocation",
    "ContainersNotReady",
    WAITING_FOR_PREEMPTION,
}
DEVICE_UNHEALTHY = "DeviceUnhealthy"
# A running unit whose pod the node lifecycle controller marked not ready with its node.
NODE_NOT_READY = "NodeNotReady"
# The condition kube-controller-manager's device taint eviction puts on a pod it deletes.
_TAINT_EVICTION = "DeletionByDeviceTaintManager"
# The kinds a unit is reconciled from, watched by the observer and listed by the backstop.
UNIT_KINDS = (kube.GPUUNIT, kube.RESOURCECLAIM, kube.POD)
ROWS_PER_TRANSACTION = 200


@dataclass(frozen=True)
class UnitObjects:
    """What the cluster holds of one unit (None: not there). `last_pod` is its pod as a
    watch saw it deleted: why it went (an eviction for a device taint) is only there."""

    gpuunit: dict | None = None
    claim: dict | None = None
    pod: dict | None = None
    last_pod: dict | None = None


class PodStep(StrEnum):
    KEEP = "keep"
    RECREATE = "recreate"
    REMOVE = "remove"


@dataclass(frozen=True)
class RowChange:
    """What a unit's row should become: `terminate` (its objects are gone), `transition` (to
    `to` with reason, message and `fields`), or nothing. `compare_status`: mirror the row into
    the GPUUnit's status afterwards."""

    action: str = ""
    to: str = ""
    reason: str = ""
    message: str = ""
    event_type: str = EventType.NORMAL
    fields: dict[str, Any] = field(default_factory=dict)
    allocated: str = ""  # the timeline's "Allocated" message when the claim just got devices
    compare_status: bool = False


NOTHING = RowChange()


@dataclass
class ReconcileResult:
    observed: int = 0
    changed: int = 0
    recreated: int = 0
    terminated: int = 0
    failed: int = 0  # units failed by a permanent error of a cluster call
    skipped: bool = False
    retry: list[Key] = field(default_factory=list)  # a temporary error: look again soon


# ---------------------------------------------------------------------------- pure decisions


def own_gpuunit(unit: GPUUnit, gpuunit: dict | None) -> dict | None:
    """The GPUUnit object if it is this unit's (not a later unit's of the same name)."""
    if gpuunit is not None and gpuunit["metadata"].get("uid") != unit.unit_k8s_uid:
        return None
    return gpuunit


def _wants_pod(unit: GPUUnit) -> bool:
    return (
        unit.run_policy == RunPolicy.RUNNING
        and unit.phase not in (UnitPhase.TERMINATING, UnitPhase.STOPPING, *UnitPhase.AT_REST)
        and not (unit.phase == UnitPhase.FAILED and unit.reason == DEVICE_UNHEALTHY)
        and not unit.rolling_out
    )


def evicted_by_taint(pod: dict | None) -> bool:
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "DisruptionTarget"
            and condition.get("reason") == _TAINT_EVICTION
        ):
            return True
    return False


def held_devices(unit: GPUUnit) -> list[DeviceKey]:
    devices = (unit.dra or {}).get("devices") or []
    return [(d.get("driver", ""), d.get("pool", ""), d.get("device", "")) for d in devices]


def needs_taints(unit: GPUUnit, objects: UnitObjects) -> bool:
    """Whether the plans may ask about the unit's devices' taints (its pod is gone or was
    evicted for one): only then are they read from the inventory mirror."""
    return bool(held_devices(unit)) and (objects.pod is None or evicted_by_taint(objects.pod))


def unhealthy_devices(
    unit: GPUUnit, taints: Mapping[DeviceKey, list[dict]], last_pod: dict | None = None
) -> list[str]:
    """The devices the unit last held that are tainted NoExecute, as "pool/device
    (key=value:NoExecute)"; when the pod was seen evicted for a taint, every device it held."""
    keys = held_devices(unit)
    named = []
    for key in keys:
        bad = [t for t in taints.get(key, []) if t.get("effect") == "NoExecute"]
        if bad:
            shown = ", ".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in bad)
            named.append(f"{key[1]}/{key[2]} ({shown})")
    if not named and evicted_by_taint(last_pod):
        named = [f"{pool}/{device}" for _driver, pool, device in keys]
    return named


def plan_pod(
    unit: GPUUnit, objects: UnitObjects, taints: Mapping[DeviceKey, list[dict]]
) -> PodStep:
    """Create the pod again when it is gone while the unit's GPUUnit and claim are there and
    it should run (not after an eviction from an unhealthy device: the unit fails, and a
    restart gets it healthy devices); remove the pod a stopped unit has."""
    if own_gpuunit(unit, objects.gpuunit) is None:
        return PodStep.KEEP
    if objects.pod is not None:
        if unit.at_rest and not unit.rolling_out:
            return PodStep.REMOVE
        return PodStep.KEEP
    if (
        objects.claim is None
        or not _wants_pod(unit)
        or unhealthy_devices(unit, taints, objects.last_pod)
    ):
        return PodStep.KEEP
    return PodStep.RECREATE


def unready_node(pod: dict | None) -> str:
    """The node of a running pod whose Ready condition is False ("" otherwise): the pods the
    reconcile asks the mirror about, whether their node is the reason."""
    if pod is None or (pod.get("status") or {}).get("phase") != "Running":
        return ""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "False":
            return (pod.get("spec") or {}).get("nodeName") or ""
    return ""


def plan_row(
    unit: GPUUnit,
    objects: UnitObjects,
    taints: Mapping[DeviceKey, list[dict]],
    unready_nodes: Collection[str] = (),
    *,
    metered: bool = False,
    now: datetime | None = None,
) -> RowChange:
    """What the unit's row should say given its objects: Terminated once a Terminating unit's
    objects are gone and its pod's end billed (not `metered`), Failed when its GPUUnit was
    deleted behind our back or a device it held turned unhealthy, else the phase, reason and
    DRA status derived from claim and pod (with NodeNotReady for a pod not ready because its
    node, among `unready_nodes`, is not). `now`: when a pod first seen holding devices idle
    began to (the start deadline's clock)."""
    gpuunit = own_gpuunit(unit, objects.gpuunit)
    claim, pod = objects.claim, objects.pod
    if unit.phase == UnitPhase.TERMINATING:
        if gpuunit is None and claim is None and pod is None and not metered:
            return RowChange(action="terminate")
        return NOTHING  # (a pod gone but still `metered`: once its end is billed)
    if gpuunit is None:
        if unit.rolling_out or unit.phase == UnitPhase.FAILED:
            return NOTHING
        return RowChange(
            action="transition",
            to=UnitPhase.FAILED,
            reason="ObjectDeleted",
            message="The GPUUnit object was deleted outside the control plane.",
            event_type=EventType.WARNING,
        )
    if unit.rolling_out or unit.at_rest:
        return RowChange(compare_status=True)  # the worker's (a stopped unit has no pod)
    if pod is None or evicted_by_taint(pod):
        if unit.phase == UnitPhase.FAILED and unit.reason == DEVICE_UNHEALTHY:
            return RowChange(compare_status=True)
        if named := unhealthy_devices(unit, taints, objects.last_pod or pod):
            return RowChange(
                action="transition",
                to=UnitPhase.FAILED,
                reason=DEVICE_UNHEALTHY,
                message=f"The pod was evicted: device {', '.join(named)} is unhealthy. Restart "
                "the unit to run it on healthy devices.",
                event_type=EventType.WARNING,
                fields={"dra": {**(unit.dra or {}), "allocated": False, "devices": []}},
                compare_status=True,
            )
    observed = observe(claim_name=unit.claim_name, claim=claim, pod=pod)
    if observed.reason == "ContainersNotReady" and observed.node_name in unready_nodes:
        observed = replace(
            observed,
            reason=NODE_NOT_READY,
            message=f"Node {observed.node_name} is not ready: the unit is not served, and its "
            "pod is evicted once its toleration of that ends (5 minutes by default) unless the "
            "node comes back.",
        )
    idle = holds_idle(pod, claim)
    fields: dict[str, Any] = {
        "dra": observed.dra,
        "node_name": observed.node_name,
        # Since when it holds devices with no container started (the start deadline's clock).
        "idle_hold_since": (unit.idle_hold_since or now or timezone.now()) if idle else None,
    }
    if unit.preemption_wait_until is not None:
        if observed.phase == UnitPhase.PENDING and not observed.dra.get("allocated"):
            observed = replace(
                observed,
                reason=WAITING_FOR_PREEMPTION,
                message="Interruptible units give way for it: their devices are free after "
                f"{unit.preemption_wait_until:%Y-%m-%d %H:%M:%S} UTC and their grace.",
            )
        elif observed.phase == UnitPhase.RUNNING:
            fields["preemption_wait_until"] = None  # it got its devices
    if (
        unit.phase == observed.phase
        and unit.reason == observed.reason
        and unit.message == observed.message
        and unit.dra == observed.dra
        and unit.node_name == observed.node_name
        and (unit.idle_hold_since is not None) == idle
    ):
        return RowChange(compare_status=True)
    allocated = ""
    if observed.dra.get("allocated") and not (unit.dra or {}).get("allocated"):
        devices = ", ".join(f"{d['pool']}/{d['device']}" for d in observed.dra["devices"])
        allocated = f"Claim {unit.claim_name} allocated: {devices}."
    problem = observed.phase == UnitPhase.FAILED or observed.reason not in _HEALTHY_REASONS
    return RowChange(
        action="transition",
        to=observed.phase,
        reason=observed.reason,
        message=observed.message,
        event_type=EventType.WARNING if problem else EventType.NORMAL,
        fields=fields,
        allocated=allocated,
        compare_status=True,
    )


def failed_by(exc: KubeError) -> RowChange:
    """The unit fails with the cluster's reason when its pod cannot be created again: retrying
    the same call cannot help. (The backstop still tries on each pass, so a unit failed for a
    full quota runs again once there is room, or when its owner restarts it.)"""
    return RowChange(
        action="transition",
        to=UnitPhase.FAILED,
        reason=exc.reason or "ReconcileFailed",
        message=f"The cluster refused to create its pod again: {exc.message}",
        event_type=EventType.WARNING,
        compare_status=True,
    )


def desired_status(unit: GPUUnit, gpuunit: dict) -> dict:
    """What the GPUUnit's status subresource should say of the unit's row."""
    status = {
        "phase": unit.phase,
        "reason": unit.reason,
        "message": unit.message,
        "nodeName": unit.node_name,
        "dra": unit.dra,
    }
    if not unit.rolling_out:
        # Caught up: the objects say what this version of the GPUUnit's spec says.
        status["observedGeneration"] = gpuunit["metadata"].get("generation")
    if unit.access:
        shown = access.for_unit(unit)
        status["access"] = {"url": shown["url"], "endpoints": shown["endpoints"]}
    return status


# ---------------------------------------------------------------------------- carrying it out


def _carry_out_pod_step(unit: GPUUnit, step: PodStep, objects: UnitObjects) -> UnitObjects:
    if step == PodStep.RECREATE:
        assert objects.gpuunit is not None
        return replace(objects, pod=provisioning.recreate_pod(unit, objects.gpuunit))
    if step == PodStep.REMOVE:
        provisioning.remove_stray_pod(unit)
    return objects


def _apply_row(unit: GPUUnit, change: RowChange, result: ReconcileResult) -> None:
    if change.action == "terminate":
        if lifecycle.mark_unit_terminated(unit):
            result.terminated += 1
        return
    if change.action != "transition":
        return
    if change.allocated:
        lifecycle.record_event(unit, reason="Allocated", message=change.allocated)
    if lifecycle.transition_unit(
        unit,
        to=change.to,
        reason=change.reason,
        message=change.message,
        event_type=change.event_type,
        **change.fields,
    ):
        result.changed += 1


def sync_gpuunit_status(unit: GPUUnit, gpuunit: dict) -> bool:
    """Mirror the unit's phase, reason and DRA status into its GPUUnit's status subresource
    when they differ (a cluster call); whether it patched. A failure only delays the mirror:
    the next look compares again."""
    desired = desired_status(unit, gpuunit)
    current = gpuunit.get("status") or {}
    if all(current.get(key) == value for key, value in desired.items()):
        return False
    desired["lastSyncTime"] = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        kube.merge_patch(kube.GPUUNIT, unit.namespace, unit.name, {"status": desired}, sub="status")
    except KubeError:
        logger.warning("could not patch status of GPUUnit %s", unit, exc_info=True)
        return False
    return True


def reconcile_batch(
    units: Iterable[GPUUnit],
    objects_of: Callable[[GPUUnit], UnitObjects],
    *,
    backstop: bool = False,
) -> ReconcileResult:
    """Reconcile these units with their objects as `objects_of` gives them: pod steps, then
    every row in one transaction (a savepoint per unit, so one unit's trouble holds no other
    back; units that may end each in a transaction of their own, since ending takes their
    tenant's lock, which orders take first), then the GPUUnit statuses."""
    result = ReconcileResult()
    units = list(units)
    objects = {unit.pk: objects_of(unit) for unit in units}
    # One query per cluster the batch's units are in (the observer's and the backstop's
    # batches are one cluster's).
    taints = {
        cluster: inventory_selectors.device_taints(
            (
                key
                for unit in units
                if unit.cluster == cluster and needs_taints(unit, objects[unit.pk])
                for key in held_devices(unit)
            ),
            cluster=cluster,
        )
        for cluster in {unit.cluster for unit in units}
    }
    unready = {
        cluster: inventory_selectors.unready_nodes(
            (unready_node(objects[unit.pk].pod) for unit in units if unit.cluster == cluster),
            cluster=cluster,
        )
        for cluster in {unit.cluster for unit in units}
    }
    refused: dict[int, RowChange] = {}
    for unit in units:
        step = plan_pod(unit, objects[unit.pk], taints[unit.cluster])
        if step == PodStep.KEEP:
            continue
        try:
            objects[unit.pk] = _carry_out_pod_step(unit, step, objects[unit.pk])
        except TemporaryError as exc:
            logger.info("reconcile of %s waits: %s", unit, exc.message)
            result.retry.append((unit.namespace, unit.name))
            continue
        except KubeError as exc:
            logger.warning("reconcile of %s refused: %s", unit, exc.message)
            if step == PodStep.RECREATE:
                refused[unit.pk] = failed_by(exc)
                result.failed += 1
            else:
                # A stopped unit stays Stopped (its row says what its owner asked for); its
                # timeline says why a pod is still there.
                lifecycle.record_event(
                    unit,
                    reason="StrayPodNotRemoved",
                    message=f"The cluster refused to delete pod "
                    f"{manifests.pod_name_for(unit.name)}: {exc.message}",
                    type=EventType.WARNING,
                )
            continue
        result.recreated += step == PodStep.RECREATE

    to_patch: list[tuple[GPUUnit, dict]] = []
    synced: list[int] = []
    metered: set = set()  # ending units whose pods are still billed
    now = timezone.now()  # one clock for the batch's rows

    def settle(unit: GPUUnit) -> None:
        unit_objects = objects[unit.pk]
        ending = unit.phase == UnitPhase.TERMINATING
        change = refused.get(unit.pk) or plan_row(
            unit,
            unit_objects,
            taints[unit.cluster],
            unready[unit.cluster],
            metered=unit.uid in metered,
            now=now,
        )
        try:
            with transaction.atomic():
                _apply_row(unit, change, result)
        except Exception:  # one unit's trouble must not hold the others back
            logger.exception("could not reconcile %s", unit)
            return
        if ending:
            return
        result.observed += 1
        synced.append(unit.pk)
        gpuunit = own_gpuunit(unit, unit_objects.gpuunit)
        if change.compare_status and gpuunit is not None:
            to_patch.append((unit, gpuunit))

    # In pk order, as every writer of a batch of rows takes their locks (beat's pages come in
    # that order; the observer's units in GPUUnit's default -id): two batches in opposite
    # orders deadlock, and a batch then loses one unit a deadlock_timeout after another.
    by_pk = sorted(units, key=lambda unit: unit.pk)
    ending = [unit for unit in by_pk if unit.phase == UnitPhase.TERMINATING]
    others = [unit for unit in by_pk if unit.phase != UnitPhase.TERMINATING]
    # Rows are written in chunks: a transaction holds the row locks of what it changed, and
    # the backstop's pass over every unit must not keep a customer's request waiting on one.
    for start in range(0, len(others), ROWS_PER_TRANSACTION):
        with transaction.atomic():
            for unit in others[start : start + ROWS_PER_TRANSACTION]:
                settle(unit)
            lifecycle.mark_units_synced(synced)
            synced.clear()
    # Billing first: a unit ending is Terminated only once its pod's end is billed, so its
    # timeline says UsageEnded before Terminated (plan_row).
    metering.settle_meters(
        (
            (unit, objects[unit.pk].claim, objects[unit.pk].pod, objects[unit.pk].last_pod)
            for unit in units
        ),
        backstop=backstop,
    )
    metered.update(metering.still_metered(ending))
    for unit in ending:
        settle(unit)
    for unit, gpuunit in to_patch:
        sync_gpuunit_status(unit, gpuunit)
    return result


def _index(objects: list[dict]) -> dict[Key, dict]:
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}


def _objects_from_lists(label_selector: str) -> Callable[[GPUUnit], UnitObjects]:
    """One list call per kind of the objects `label_selector` selects, as each unit's
    objects. Raises the KubeError of a list the cluster refuses."""
    listed = {
        kind: _index(kube.list_objects(kind, label_selector=label_selector)) for kind in UNIT_KINDS
    }

    def objects_of(unit: GPUUnit) -> UnitObjects:
        return UnitObjects(
            gpuunit=listed[kube.GPUUNIT].get((unit.namespace, unit.name)),
            claim=listed[kube.RESOURCECLAIM].get((unit.namespace, unit.claim_name)),
            pod=listed[kube.POD].get((unit.namespace, manifests.pod_name_for(unit.name))),
        )

    return objects_of


def reconcile_units(cluster: str | None = None) -> ReconcileResult:
    """The full pass over every unit of `cluster` (the process's own by default; tests and
    tools drive units with it, beat runs `reconcile_page`): one list call per kind there, then
    every unit as the observer handles the units of an event, and the usage meters checked
    against what it saw."""
    cluster = cluster or settings.CLUSTER_NAME
    with metrics.RECONCILE_SECONDS.time(), kube.using(cluster):
        units = selectors.list_units_to_reconcile(cluster=cluster)
        if not units:
            metering.settle_unreconciled([], cluster=cluster)
            return ReconcileResult()
        try:
            objects_of = _objects_from_lists(manifests.OURS_SELECTOR)
        except KubeError:
            # Unreachable or failing cluster: keep the last known status rather than guess.
            logger.warning("reconcile skipped: cannot list %s's objects", cluster, exc_info=True)
            return ReconcileResult(skipped=True)
        result = reconcile_batch(units, objects_of, backstop=True)
        metering.settle_unreconciled(units, cluster=cluster)
        return result


# ---------------------------------------------------------------------------- the backstop's pages


def page_cursor_key(cluster: str) -> str:
    """Where `cluster`'s next page starts: the pk of the last unit visited (0: the start). In
    the shared cache, so whichever worker gets beat's tick reads it and a restart keeps it;
    losing it only starts the cycle over."""
    return f"runtime:reconcile:cursor:{cluster}"


@dataclass(frozen=True)
class Page:
    """A tick's share of the units: those whose pk is in (after, upto]. The last page of a
    cycle has no upper bound (`upto` None) and sends the next tick back to the start."""

    after: int
    upto: int | None

    @property
    def next_after(self) -> int:
        return self.upto or 0


def page_of(after: int, pks: Sequence[int], size: int) -> Page:
    """The page of `size` units after `after`, given the ascending pks of the first `size + 1`
    units to reconcile beyond it (one more than the page says whether another page follows)."""
    if len(pks) > size:
        return Page(after=after, upto=pks[size - 1])
    return Page(after=after, upto=None)


def page_selector(names: Iterable[str]) -> str:
    """The label selector of our objects of the units of these names (of any tenant: objects
    are told apart by namespace afterwards)."""
    return f"{manifests.OURS_SELECTOR},{manifests.LABEL_UNIT} in ({','.join(sorted(set(names)))})"


def reconcile_page(cluster: str | None = None) -> ReconcileResult:
    """Beat's backstop tick of `cluster` (the process's own by default): the next
    RECONCILE_PAGE_SIZE of its units by pk from its cursor, their objects from one list call
    per kind that selects only theirs, then the usage meters of the page's span of pks. Its
    cost follows the page size, not the fleet; a cycle of ceil(units / page size) ticks visits
    every unit once. A tick whose lists fail leaves the cursor, so the next tick tries the
    same page."""
    cluster = cluster or settings.CLUSTER_NAME
    cursor = page_cursor_key(cluster)
    with metrics.RECONCILE_SECONDS.time(), kube.using(cluster):
        size = settings.RECONCILE_PAGE_SIZE
        after = int(cache.get(cursor) or 0)
        units = selectors.list_units_to_reconcile_after(
            cluster=cluster, after=after, limit=size + 1
        )
        page = page_of(after, [unit.pk for unit in units], size)
        units = units[:size]
        span = (page.after, page.upto)
        if not units:
            cache.set(cursor, page.next_after, timeout=None)
            metering.settle_unreconciled([], cluster=cluster, span=span)
            return ReconcileResult()
        try:
            objects_of = _objects_from_lists(page_selector(unit.name for unit in units))
        except KubeError:
            logger.warning("reconcile skipped: cannot list %s's objects", cluster, exc_info=True)
            return ReconcileResult(skipped=True)
        # Moved on before the batch: a page whose reconcile raises must not hold the rest back.
        cache.set(cursor, page.next_after, timeout=None)
        result = reconcile_batch(units, objects_of, backstop=True)
        metering.settle_unreconciled(units, cluster=cluster, span=span)
        return result
