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
from runtime import access, lifecycle, manifests, provisioning, selectors
from runtime.models import EventType, GPUUnit, UnitPhase
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


def _desired_status(unit: GPUUnit) -> dict:
    status = {
        "phase": unit.phase,
        "reason": unit.reason,
        "message": unit.message,
        "nodeName": unit.node_name,
        "dra": unit.dra,
    }
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


def recreate_missing_pod(
    unit: GPUUnit, *, gpuunit: dict | None, claim: dict | None, pod: dict | None
) -> dict | None:
    """The unit's pod, created again when it is gone while its GPUUnit (see own_gpuunit) and
    claim are still there (a cluster call; None when that failed or the pod is not the unit's
    to have)."""
    if pod is not None or claim is None or gpuunit is None:
        return pod
    if unit.phase == UnitPhase.TERMINATING:
        return None
    try:
        return provisioning.recreate_pod(unit, gpuunit)
    except KubeError as exc:
        logger.warning("could not recreate pod of %s: %s", unit, exc)
        return None


def apply_observation(
    unit: GPUUnit,
    *,
    gpuunit: dict | None,
    claim: dict | None,
    pod: dict | None,
    result: ReconcileResult,
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
    if gpuunit is None:
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
    if _apply(unit, observe(claim_name=unit.claim_name, claim=claim, pod=pod)):
        result.changed += 1
    return True


def sync_gpuunit_status(unit: GPUUnit, gpuunit: dict) -> bool:
    """Mirror the unit's phase, reason and DRA status into its GPUUnit's status subresource
    when they differ (a cluster call); whether it patched."""
    desired = _desired_status(unit)
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
    units = selectors.list_units_to_reconcile()
    if not units:
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
    return result
