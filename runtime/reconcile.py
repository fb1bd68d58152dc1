"""Level-based reconciliation: observe every managed object with one list call per kind, then
bring each unit's phase, timeline and GPUUnit status in line with what the cluster reports."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.utils import timezone

from controlplane import kube
from controlplane.kube.errors import KubeError
from runtime import lifecycle, manifests, provisioning, selectors
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
    return {
        "phase": unit.phase,
        "reason": unit.reason,
        "message": unit.message,
        "nodeName": unit.node_name,
        "dra": unit.dra,
    }


def _sync_custom_object_status(unit: GPUUnit, custom_object: dict) -> None:
    desired = _desired_status(unit)
    current = custom_object.get("status") or {}
    if all(current.get(key) == value for key, value in desired.items()):
        return
    desired["lastSyncTime"] = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        kube.merge_patch(kube.GPUUNIT, unit.namespace, unit.name, {"status": desired}, sub="status")
    except KubeError:
        logger.warning("could not patch status of GPUUnit %s", unit, exc_info=True)


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


def reconcile_units() -> ReconcileResult:
    result = ReconcileResult()
    units = selectors.list_units_to_reconcile()
    if not units:
        return result
    selector = f"{manifests.LABEL_MANAGED_BY}={manifests.MANAGED_BY}"
    try:
        custom_objects = _index(kube.list_objects(kube.GPUUNIT, label_selector=selector))
        claims = _index(kube.list_objects(kube.RESOURCECLAIM, label_selector=selector))
        pods = _index(kube.list_objects(kube.POD, label_selector=selector))
    except KubeError:
        # Unreachable or failing cluster: keep the last known status rather than guess.
        logger.warning("reconcile skipped: cannot list cluster objects", exc_info=True)
        result.skipped = True
        return result

    synced: list[int] = []
    for unit in units:
        key = (unit.namespace, unit.name)
        custom_object = custom_objects.get(key)
        if custom_object and custom_object["metadata"].get("uid") != unit.unit_k8s_uid:
            custom_object = None  # an object of another unit with the same name
        claim = claims.get((unit.namespace, unit.claim_name))
        pod = pods.get((unit.namespace, manifests.pod_name_for(unit.name)))
        if unit.phase == UnitPhase.TERMINATING:
            if custom_object is None and claim is None and pod is None:
                lifecycle.mark_unit_terminated(unit)
                result.terminated += 1
            continue
        result.observed += 1
        synced.append(unit.pk)
        if custom_object is None:
            if unit.phase != UnitPhase.FAILED:
                lifecycle.transition_unit(
                    unit,
                    to=UnitPhase.FAILED,
                    reason="ObjectDeleted",
                    message="The GPUUnit object was deleted outside the control plane.",
                    event_type=EventType.WARNING,
                )
                result.changed += 1
            continue
        if pod is None and claim is not None:
            pod = _recreate_pod(unit, custom_object)
            result.recreated += 1 if pod else 0
        if _apply(unit, observe(claim_name=unit.claim_name, claim=claim, pod=pod)):
            result.changed += 1
        _sync_custom_object_status(unit, custom_object)
    lifecycle.mark_units_synced(synced)
    return result


def _recreate_pod(unit: GPUUnit, custom_object: dict) -> dict | None:
    try:
        return provisioning.recreate_pod(unit, custom_object)
    except KubeError as exc:
        logger.warning("could not recreate pod of %s: %s", unit, exc)
        return None
