"""Level-based reconciliation of one unit against its GPUUnit, claim and pod as observed, and
the full pass over every unit. The observer (runtime/observer.py) calls the same three steps
per event; beat's `reconcile_units` is the backstop that catches what a watch missed.

Steps per unit: recreate a missing pod (cluster), apply the observation (database only, so a
batch of units can share one transaction), mirror the result into the GPUUnit status
(cluster)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.utils import timezone

from controlplane import kube, metrics
from controlplane.kube.errors import KubeError
from inventory import selectors as inventory_selectors
from runtime import access, lifecycle, manifests, provisioning, selectors
from runtime.models import EventType, GPUUnit, RunPolicy, UnitPhase
from runtime.status import Observed, observe

logger = logging.getLogger(__name__)

_HEALTHY_REASONS = {"Running", "Starting", "WaitingForAllocation", "ContainersNotReady"}


@dataclass
class ReconcileResult:
    observed: int = 0
    changed: int = 0
    recreated: int = 0
    terminated: int = 0
    skipped: bool = False


def _index(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}


def _desired_status(unit: GPUUnit, gpuunit: dict) -> dict:
    status = {
        "phase": unit.phase,
        "reason": unit.reason,
        "message": unit.message,
        "nodeName": unit.node_name,
        "dra": unit.dra,
    }
    if not rolling_out(unit):
        # Caught up: the objects say what this version of the GPUUnit's spec says.
        status["observedGeneration"] = gpuunit["metadata"].get("generation")
    if unit.access:
        shown = access.for_unit(unit)
        status["access"] = {"url": shown["url"], "endpoints": shown["endpoints"]}
    return status


def _apply(unit: GPUUnit, observed: Observed) -> bool:
    same = (
        unit.phase == observed.phase
        and unit.reason == observed.reason
        and unit.message == observed.message
        and unit.dra == observed.dra
        and unit.node_name == observed.node_name
    )
    if same:
        return False
    allocated_now = observed.dra.get("allocated") and not (unit.dra or {}).get("allocated")
    if allocated_now:
        devices = ", ".join(f"{d['pool']}/{d['device']}" for d in observed.dra["devices"])
        lifecycle.record_event(
            unit, reason="Allocated", message=f"Claim {unit.claim_name} allocated: {devices}."
        )
    problem = observed.phase == UnitPhase.FAILED or observed.reason not in _HEALTHY_REASONS
    return lifecycle.transition_unit(
        unit,
        to=observed.phase,
        reason=observed.reason,
        message=observed.message,
        event_type=EventType.WARNING if problem else EventType.NORMAL,
        dra=observed.dra,
        node_name=observed.node_name,
    )


def own_gpuunit(unit: GPUUnit, gpuunit: dict | None) -> dict | None:
    """The GPUUnit object if it is this unit's (not a later unit's of the same name)."""
    if gpuunit is not None and gpuunit["metadata"].get("uid") != unit.unit_k8s_uid:
        return None
    return gpuunit


def rolling_out(unit: GPUUnit) -> bool:
    """A stop, start, restart or update is being carried out: its worker moves the unit's
    pod and phase, so the reconcile leaves both alone until it has recorded the rollout."""
    return unit.observed_generation < unit.generation or unit.phase == UnitPhase.STOPPING


def _wants_pod(unit: GPUUnit) -> bool:
    return (
        unit.run_policy == RunPolicy.RUNNING
        and unit.phase not in (UnitPhase.TERMINATING, UnitPhase.STOPPING, UnitPhase.STOPPED)
        and not (unit.phase == UnitPhase.FAILED and unit.reason == DEVICE_UNHEALTHY)
        and not rolling_out(unit)
    )


def recreate_missing_pod(
    unit: GPUUnit,
    *,
    gpuunit: dict | None,
    claim: dict | None,
    pod: dict | None,
    last_pod: dict | None = None,
) -> dict | None:
    """The unit's pod, created again when it is gone while its GPUUnit (see own_gpuunit) and
    claim are still there and the unit should run, and deleted when a stopped unit has one
    (cluster calls; None when that failed or the pod is not the unit's to have). A pod
    evicted from an unhealthy device is not recreated: the unit fails, and a restart gets it
    healthy devices. `last_pod` is the pod as it was deleted, when a watch saw that."""
    if gpuunit is None:
        return pod
    if pod is not None:
        if unit.phase == UnitPhase.STOPPED and not rolling_out(unit):
            try:
                provisioning.remove_stray_pod(unit)
            except KubeError as exc:
                logger.warning("could not remove the pod of stopped %s: %s", unit, exc)
        return pod
    if claim is None or not _wants_pod(unit) or unhealthy_devices(unit, last_pod):
        return None
    try:
        return provisioning.recreate_pod(unit, gpuunit)
    except KubeError as exc:
        logger.warning("could not recreate pod of %s: %s", unit, exc)
        return None


DEVICE_UNHEALTHY = "DeviceUnhealthy"
# The condition kube-controller-manager's device taint eviction puts on a pod it deletes.
_TAINT_EVICTION = "DeletionByDeviceTaintManager"


def _evicted_by_taint(pod: dict | None) -> bool:
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "DisruptionTarget"
            and condition.get("reason") == _TAINT_EVICTION
        ):
            return True
    return False


def unhealthy_devices(unit: GPUUnit, last_pod: dict | None = None) -> list[str]:
    """The devices the unit last held that are tainted NoExecute (by the inventory mirror),
    as "pool/device (key=value:NoExecute)"; when the pod was seen evicted for a taint, every
    device it held."""
    devices = (unit.dra or {}).get("devices") or []
    if not devices:
        return []
    keys = [(d.get("driver", ""), d.get("pool", ""), d.get("device", "")) for d in devices]
    taints = inventory_selectors.device_taints(keys)
    named = []
    for key in keys:
        bad = [t for t in taints.get(key, []) if t.get("effect") == "NoExecute"]
        if bad:
            shown = ", ".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in bad)
            named.append(f"{key[1]}/{key[2]} ({shown})")
    if not named and _evicted_by_taint(last_pod):
        named = [f"{pool}/{device}" for _driver, pool, device in keys]
    return named


def apply_observation(
    unit: GPUUnit,
    *,
    gpuunit: dict | None,
    claim: dict | None,
    pod: dict | None,
    result: ReconcileResult,
    last_pod: dict | None = None,
) -> bool:
    """Bring the unit's row in line with its objects as observed (database only): Terminated
    once a Terminating unit's objects are gone, Failed when its GPUUnit was deleted behind our
    back, else the phase, reason and DRA status derived from the claim and pod. Returns whether
    the GPUUnit's status should be compared and patched."""
    gpuunit = own_gpuunit(unit, gpuunit)
    if unit.phase == UnitPhase.TERMINATING:
        if gpuunit is None and claim is None and pod is None:
            lifecycle.mark_unit_terminated(unit)
            result.terminated += 1
        return False
    result.observed += 1
    if gpuunit is None and not rolling_out(unit):
        if unit.phase != UnitPhase.FAILED:
            lifecycle.transition_unit(
                unit,
                to=UnitPhase.FAILED,
                reason="ObjectDeleted",
                message="The GPUUnit object was deleted outside the control plane.",
                event_type=EventType.WARNING,
            )
            result.changed += 1
        return False
    if gpuunit is None:
        return False
    if rolling_out(unit) or unit.phase == UnitPhase.STOPPED:
        return True  # the worker's (or nobody's: a stopped unit has no pod to observe)
    if pod is None or _evicted_by_taint(pod):
        if unit.phase == UnitPhase.FAILED and unit.reason == DEVICE_UNHEALTHY:
            return True
        if named := unhealthy_devices(unit, last_pod or pod):
            lifecycle.transition_unit(
                unit,
                to=UnitPhase.FAILED,
                reason=DEVICE_UNHEALTHY,
                message=f"The pod was evicted: device {', '.join(named)} is unhealthy. Restart "
                "the unit to run it on healthy devices.",
                event_type=EventType.WARNING,
                dra={**(unit.dra or {}), "allocated": False, "devices": []},
                node_name="",
            )
            result.changed += 1
            return True
    if _apply(unit, observe(claim_name=unit.claim_name, claim=claim, pod=pod)):
        result.changed += 1
    return True


def sync_gpuunit_status(unit: GPUUnit, gpuunit: dict) -> bool:
    """Mirror the unit's phase, reason and DRA status into its GPUUnit's status subresource
    when they differ (a cluster call); whether it patched."""
    desired = _desired_status(unit, gpuunit)
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


def reconcile_units() -> ReconcileResult:
    """The full pass (beat's backstop behind the observer): one list call per kind, then each
    unit as the observer would handle an event about it."""
    with metrics.RECONCILE_SECONDS.time():
        return _reconcile_units()


def _reconcile_units() -> ReconcileResult:
    result = ReconcileResult()
    read_at = timezone.now()
    units = selectors.list_units_to_reconcile()
    if not units:
        lifecycle.reconcile_meters([], seen_at=read_at)
        return result
    selector = f"{manifests.LABEL_MANAGED_BY}={manifests.MANAGED_BY}"
    try:
        gpuunits = _index(kube.list_objects(kube.GPUUNIT, label_selector=selector))
        claims = _index(kube.list_objects(kube.RESOURCECLAIM, label_selector=selector))
        pods = _index(kube.list_objects(kube.POD, label_selector=selector))
    except KubeError:
        # Unreachable or failing cluster: keep the last known status rather than guess.
        logger.warning("reconcile skipped: cannot list cluster objects", exc_info=True)
        result.skipped = True
        return result
    synced: list[int] = []
    for unit in units:
        gpuunit = own_gpuunit(unit, gpuunits.get((unit.namespace, unit.name)))
        claim = claims.get((unit.namespace, unit.claim_name))
        pod = pods.get((unit.namespace, manifests.pod_name_for(unit.name)))
        recreated = recreate_missing_pod(unit, gpuunit=gpuunit, claim=claim, pod=pod)
        if recreated is not pod:
            result.recreated += 1 if recreated else 0
            pod = recreated
        if unit.phase != UnitPhase.TERMINATING:
            synced.append(unit.pk)
        if apply_observation(unit, gpuunit=gpuunit, claim=claim, pod=pod, result=result):
            assert gpuunit is not None
            sync_gpuunit_status(unit, gpuunit)
    lifecycle.mark_units_synced(synced)
    lifecycle.reconcile_meters(units, seen_at=read_at)
    return result
