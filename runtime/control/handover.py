"""Handing devices over to one unit (ARCHITECTURE §22): the devices interruptible units give
up for an on-demand one must reach that unit, not whichever pending claim the scheduler tries
first once they are released.

Two parts, both in the unit's cluster:

- **A taint only it tolerates.** Each device gets a DeviceTaintRule (KEP-5055) with the
  NoSchedule taint `runtime.lokiwager.io/handover=<unit uid>`. NoSchedule leaves the claims
  already allocated a device alone (the preempted units run out their notice and grace), and
  keeps every other claim from being allocated it afterwards.
- **A claim that asks for exactly them.** The unit's claim tolerates that taint and selects
  the devices by their `uuid` attribute in CEL (manifests.handover_selector). A claim's spec
  cannot change, so the unit's claim is made again (provisioning._renew_claim, through a
  restart the control plane requests).

Once the unit holds devices, or stopped waiting, the rules go and `handover` is cleared; the
unit's next start or restart gives it a claim without the pin. On a cluster that does not
serve DeviceTaintRule (off by default before 1.36) the claim is still pinned, but another
claim could be allocated a device first: the hand-over says so on the unit's timeline."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from billing import ledger
from controlplane import kube
from controlplane.kube.errors import KubeError, TemporaryError
from inventory import selectors as inventory_selectors
from runtime import lifecycle, manifests
from runtime.models import EventType, GPUUnit, Reservation

logger = logging.getLogger(__name__)

DeviceKey = tuple[str, str, str]  # (driver, pool, device)


def plan(unit: GPUUnit, devices: Iterable[DeviceKey], *, now: datetime) -> dict:
    """What GPUUnit.handover says for `devices` handed over to `unit`: the taint value (its
    uid), the devices and the CEL selector naming them by uuid (empty when one of them has
    none in the mirror: the toleration alone then lets it take any free device)."""
    keys = sorted(set(devices))
    uuids = inventory_selectors.device_uuids(keys, cluster=unit.cluster)
    named = all(key in uuids for key in keys)
    return {
        "value": str(unit.uid),
        "devices": [{"driver": d, "pool": p, "device": n} for d, p, n in keys],
        "selector": manifests.handover_selector((d, uuids[(d, p, n)]) for d, p, n in keys)
        if named and keys
        else "",
        "at": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def taint(unit: GPUUnit, handover: dict) -> bool:
    """Taint the handed-over devices for `unit` in its cluster (idempotent: the rules' names
    are deterministic). False when the cluster serves no DeviceTaintRule."""
    spec = manifests.Handover.of(handover)
    assert spec is not None
    with kube.using(unit.cluster):
        kind = kube.device_taint_rule_kind()
        for device in handover.get("devices") or []:
            driver, pool, name = device["driver"], device["pool"], device["device"]
            rule = manifests.build_handover_rule(
                name=manifests.handover_rule_name(spec.value, driver, pool, name),
                handover=spec,
                driver=driver,
                pool=pool,
                device=name,
                tenant=unit.tenant.slug,
            )
            rule["apiVersion"] = kind.api_version
            try:
                kube.create_or_adopt(kind, rule, ours=_ours(spec.value))
            except KubeError as exc:
                if exc.status == 404:  # not served here
                    return False
                raise
    return True


def untaint(unit: GPUUnit) -> int:
    """Remove the rules that keep devices for `unit` (all of them, by label). Returns how
    many went."""
    selector = f"{manifests.LABEL_HANDOVER}={unit.uid}"
    with kube.using(unit.cluster):
        kind = kube.device_taint_rule_kind()
        try:
            rules = kube.list_objects(kind, label_selector=selector)
        except KubeError as exc:
            if exc.status == 404:
                return 0
            raise
        return sum(kube.delete(kind, None, rule["metadata"]["name"]) for rule in rules)


def begin(
    unit: GPUUnit,
    devices: Iterable[DeviceKey],
    *,
    now: datetime,
    why: str = "given up by interruptible units for it",
) -> dict:
    """Keep `devices` for `unit`: the taints first (before anything releases them), then the
    plan recorded on the unit; the caller has its claim made (again). Returns the plan."""
    handover = plan(unit, devices, now=now)
    _end_held(unit, handover)
    tainted = taint(unit, handover)
    GPUUnit.objects.filter(pk=unit.pk).update(handover=handover)
    unit.handover = handover
    count = len(handover["devices"])
    if tainted:
        message = (
            f"{count} device(s), {why}, are handed over to it: tainted NoSchedule for it "
            f"alone ({manifests.HANDOVER_TAINT_KEY}={unit.uid}) until it holds them."
        )
        lifecycle.record_event(unit, reason="HandingOver", message=message)
    else:
        message = (
            f"{count} device(s), {why}, are handed over to it, but cluster {unit.cluster} "
            "serves no DeviceTaintRule: another claim may be allocated them first."
        )
        lifecycle.record_event(unit, reason="HandingOver", message=message, type=EventType.WARNING)
    logger.info("handing %s over to %s (tainted: %s)", handover["devices"], unit, tainted)
    return handover


def _end_held(unit: GPUUnit, handover: dict) -> None:
    """An earlier hand-over of any of these devices to a unit that holds them now (a lent
    slot's unit, say) is over: its taints would keep them from `unit` too. Beat's pass ends
    it too, but only on its next run."""
    wanted = {(d["driver"], d["pool"], d["device"]) for d in handover["devices"]}
    for other in (
        GPUUnit.objects.filter(cluster=unit.cluster, dra__allocated=True)
        .exclude(handover={})
        .exclude(pk=unit.pk)
    ):
        held = {(d["driver"], d["pool"], d["device"]) for d in other.handover.get("devices") or []}
        if held & wanted:
            end(other, why="It holds its devices")


def end(unit: GPUUnit, *, why: str) -> None:
    """The hand-over is over (`why`): its rules go, then `handover` is cleared."""
    removed = untaint(unit)
    GPUUnit.objects.filter(pk=unit.pk).update(handover={})
    unit.handover = {}
    lifecycle.record_event(
        unit,
        reason="HandoverEnded",
        message=f"{why}: the {removed} taint(s) that kept devices for it are removed.",
    )


def take_slot(unit: GPUUnit, *, now: datetime) -> None:
    """Provisioning of a unit ordered on a reservation, before its objects are made: the
    placeholder of its slot gives its devices over to it (tainted for the unit alone, and its
    claim pinned to them: GPUUnit.handover), then goes. TemporaryError while the placeholder
    is still there. A slot whose placeholder held nothing (no devices were free) hands
    nothing over: the unit asks for any device of its package."""
    reservation, slot = unit.reservation, unit.reservation_slot
    if reservation is None or slot is None:
        return
    name = reservation.placeholder_name(slot)
    namespace = reservation.tenant.namespace  # the owner's (a lent slot's unit is another's)
    claim = kube.get(kube.RESOURCECLAIM, namespace, name)
    mine = manifests.LABEL_RESERVATION
    if claim is not None and _label(claim, mine) != str(reservation.uid):
        claim = None  # not its placeholder: never touched
    if claim is None and not unit.interruptible and not unit.handover:
        _take_back(unit, reservation, slot, now=now)
        return
    if not unit.handover and claim is not None:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        devices = {(r["driver"], r["pool"], r["device"]) for r in results}
        if devices:
            # A lent slot's unit is another tenant's: it is not told the reservation's name.
            lent = unit.tenant_id != reservation.tenant_id
            begin(
                unit,
                devices,
                now=now,
                why="held by a reserved slot lent to it"
                if lent
                else f"held by reservation {reservation.name}",
            )
    if claim is None:
        return
    # The slot's unused time ends as its placeholder hands over, to the whole second: the
    # unit's own meter opens when its pod starts on the devices, a time the cluster gives in
    # whole seconds, so the two never overlap.
    ledger.close_meter(
        ledger.slot_resource_uid(reservation.uid, slot), at=now.replace(microsecond=0)
    )
    pod = kube.get(kube.POD, namespace, name)
    if pod is not None and _label(pod, mine) == str(reservation.uid):
        kube.delete(kube.POD, namespace, name)
    kube.delete(kube.RESOURCECLAIM, namespace, name)
    if kube.get(kube.RESOURCECLAIM, namespace, name) is not None:
        raise TemporaryError(f"waiting for placeholder {name} to be deleted", delay=0.5)


def _take_back(unit: GPUUnit, reservation: Reservation, slot: int, *, now: datetime) -> None:
    """The owner's unit on a slot lent to an interruptible unit: that unit's devices are kept
    for it from now (the lender is told to give way by the preemption pass, which finds it by
    its slot); its claim, made next, asks for exactly them."""
    lent = (
        GPUUnit.objects.live()
        .filter(reservation=reservation, reservation_slot=slot, interruptible=True)
        .exclude(pk=unit.pk)
        .first()
    )
    devices = {
        (d["driver"], d["pool"], d["device"])
        for d in ((lent.dra if lent else {}).get("devices") or [])
    }
    if devices:
        begin(unit, devices, now=now, why=f"lent from reservation {reservation.name}")
        # Its claim is made with them: no restart is needed when the lender is stopped.
        unit.handover = {**unit.handover, "operation": unit.operation_id}
        GPUUnit.objects.filter(pk=unit.pk).update(handover=unit.handover)


def _label(obj: dict, key: str) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(key) or "")


def _ours(value: str) -> Callable[[dict], bool]:
    def check(found: dict) -> bool:
        labels = (found.get("metadata") or {}).get("labels") or {}
        return (
            labels.get(manifests.LABEL_MANAGED_BY) == manifests.MANAGED_BY
            and labels.get(manifests.LABEL_HANDOVER) == value
        )

    return check
