"""Metering (ARCHITECTURE §15): a unit is billed for the devices its pod holds, from the time
the cluster reports the pod started on them to the time it reports they were released, as
the one reconcile observed them; billing.ledger writes it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.db import transaction

from billing import ledger
from controlplane import kube
from runtime import lifecycle, manifests, selectors
from runtime.control.status import (
    LAST_SEEN,
    OBSERVED,
    REPLACED,
    dra_status,
    held_since,
    k8s_time,
    meter_step,
    released_at,
)
from runtime.models import EventType, GPUUnit, Reservation


def holding(
    unit: GPUUnit, *, claim: dict | None, pod: dict, reservation_end: datetime | None = None
) -> ledger.Holding:
    """What the unit's pod holds, for the usage ledger: the devices (or shares) allocated to
    its claim, the fallback alternative it got, and the reservation it runs on (until
    `reservation_end`)."""
    dra = dra_status(unit.claim_name, claim)
    return ledger.Holding(
        unit_uid=unit.uid,
        unit_name=unit.name,
        tenant_id=unit.tenant_id,
        package_id=unit.package_id,
        claim_uid=((claim or {}).get("metadata") or {}).get("uid") or unit.claim_k8s_uid,
        region=unit.region,
        pod_uid=(pod.get("metadata") or {}).get("uid") or "",
        pod_created_at=k8s_time((pod.get("metadata") or {}).get("creationTimestamp")),
        alternative=dra.get("alternative", ""),
        interruptible=unit.interruptible,
        devices=list(dra.get("devices") or []),
        count=unit.count,
        reservation_uid=(
            unit.reservation.uid
            if reservation_end is not None and unit.reservation is not None
            else None
        ),
        reservation_end=reservation_end,
    )


def settle_meters(
    observed: Iterable[tuple[GPUUnit, dict | None, dict | None, dict | None]], *, backstop: bool
) -> tuple[int, int]:
    """After a reconcile read these units' (unit, claim, pod, last pod): bill the devices
    their pods hold, from the time the cluster says each started to the time it says they were
    released (runtime/control/status.py `meter_step`). An end the cluster cannot date is put
    at the last time the pod was seen running, and the unit's timeline says so. Returns
    (opened, closed). A constant number of statements plus one per meter opened or closed."""
    observed = list(observed)
    meters = ledger.open_meters(unit.uid for unit, *_ in observed)
    steps = [
        (
            unit,
            claim,
            pod,
            meter_step(
                meters[unit.uid].pod_uid if unit.uid in meters else None,
                metered_created=meters[unit.uid].pod_created_at if unit.uid in meters else None,
                pod=pod,
                last_pod=last_pod,
                claim=claim,
                missing_before=unit.uid in meters and meters[unit.uid].missing_since is not None,
                backstop=backstop,
            ),
        )
        for unit, claim, pod, last_pod in observed
    ]
    ledger.mark_seen(unit.uid for unit, _, _, step in steps if step.seen)
    ledger.mark_missing(unit.uid for unit, _, _, step in steps if step.missing)
    # The pod each opening meter follows: the current one, or one seen deleted that came and
    # went unmetered.
    opens = [
        (unit, claim, last if step.of_last else pod, step)
        for (unit, claim, pod, step), (*_, last) in zip(steps, observed, strict=True)
        if step.open_at is not None
    ]
    ends = _reservation_ends(unit for unit, _, _, _ in opens)
    opening = [
        (
            unit,
            holding(unit, claim=claim, pod=pod, reservation_end=ends.get(unit.pk)),
            step.open_at,
            step.open_until,
        )
        for unit, claim, pod, step in opens
        if pod is not None and step.open_at is not None
    ]
    if opening:
        # A pod metered before, or older than one metered since (a late or stale view of the
        # cluster), bills nothing again.
        metered = ledger.pods_metered(unit.uid for unit, *_ in opening)
        opening = [
            (unit, held, start, until)
            for unit, held, start, until in opening
            if unit.uid not in metered
            or not metered[unit.uid].is_stale(held.pod_uid, held.pod_created_at)
        ]
    floors = ledger.billed_until(unit.uid for unit, *_ in opening) if opening else {}
    opened = closed = 0
    # Each meter's open or close commits with its timeline entry: the usage audit reads the
    # timeline, and a process killed between the two would leave a meter no entry explains.
    for unit, _claim, _pod, step in steps:
        if not step.close:
            continue
        with transaction.atomic():
            done = ledger.close_meter(unit.uid, at=step.close_at, pod_uid=meters[unit.uid].pod_uid)
            if done is not None:
                _ended(unit, done, how=step.ended)
        if done is None:
            continue
        closed += 1
        floors[unit.uid] = max(floors.get(unit.uid, done.end), done.end)
    for unit, held, start, until in opening:
        start = max(start, floors[unit.uid]) if unit.uid in floors else start
        with transaction.atomic():
            if not ledger.open_meter(held, at=start):
                continue  # another process opened it (or billed this pod) first
            lifecycle.append_event(
                unit,
                reason="UsageStarted",
                message=f"Pod {held.pod_uid} runs on its devices since "
                f"{start:%Y-%m-%d %H:%M:%S} UTC: billed from then.",
                observed_at=start,
            )
            if until is not None:
                # First seen after it released its devices: its whole holding, at once.
                done = ledger.close_meter(unit.uid, at=until, pod_uid=held.pod_uid)
                if done is not None:
                    _ended(unit, done, how=OBSERVED)
                    closed += 1
        opened += 1
    # Seen holding now: an end the cluster will not date is put no earlier than this.
    ledger.mark_seen(unit.uid for unit, _, _, until in opening if until is None)
    return opened, closed


def still_metered(units: Iterable[GPUUnit]) -> set[uuid.UUID]:
    """Which of these units' pods are still billed (an open meter): a unit is Terminated only
    once its last pod's end is (its timeline says UsageEnded before Terminated). One
    statement, none for no units."""
    uids = [unit.uid for unit in units]
    return set(ledger.open_meters(uids)) if uids else set()


def _reservation_ends(units: Iterable[GPUUnit]) -> dict[int, datetime]:
    """The window's end of the reservation each of these units runs on (only those on one;
    no query when none is): their time before it is the reservation's used time."""
    # A lent slot's interruptible unit is not the reservation's use: its owner pays the window.
    on = [unit for unit in units if unit.reservation_id is not None and not unit.interruptible]
    if not on:
        return {}
    found = Reservation.objects.in_bulk([unit.reservation_id for unit in on])
    ends = {}
    for unit in on:
        if (reservation := found.get(unit.reservation_id)) is not None:
            unit.reservation = reservation
            ends[unit.pk] = reservation.end
    return ends


def _ended(unit: GPUUnit, done: ledger.Closed, *, how: str) -> None:
    """Say on the unit's timeline until when its pod's usage is billed, and whether the
    cluster reported that time or it is estimated (a warning)."""
    pod, end = done.meter.pod_uid, done.end
    if how == OBSERVED:
        message = (
            f"Pod {pod} released its devices at {end:%Y-%m-%d %H:%M:%S} UTC: billed until then."
        )
        lifecycle.append_event(unit, reason="UsageEnded", message=message, observed_at=end)
        return
    why = "a newer pod of the unit was created" if how == REPLACED else "it was last seen running"
    lifecycle.append_event(
        unit,
        reason="UsageEnded",
        message=f"The cluster did not report when pod {pod} released its devices; usage is "
        f"billed until {end:%Y-%m-%d %H:%M:%S} UTC, when {why}.",
        type=EventType.WARNING,
        observed_at=end,
    )
    lifecycle.append_event(
        unit,
        reason="UsageEndEstimated",
        message=f"The end of pod {pod}'s usage is estimated: {why} at {end:%Y-%m-%d %H:%M:%S} UTC.",
        type=EventType.WARNING,
    )


def close_meters_of_gone_pods(last_pods: Iterable[dict]) -> int:
    """The observer saw these pods deleted: their meters close at the ends they report,
    whatever their units have become meanwhile."""
    ends = {
        uid: end
        for pod in last_pods
        if (uid := (pod.get("metadata") or {}).get("uid"))
        and (end := released_at(pod, gone=True)) is not None
    }
    meters = ledger.meters_of_pods(ends) if ends else {}
    units = GPUUnit.objects.in_bulk(list(meters), field_name="uid") if meters else {}
    closed = 0
    for unit_uid, pod_uid in meters.items():
        with transaction.atomic():
            done = ledger.close_meter(unit_uid, at=ends[pod_uid], pod_uid=pod_uid)
            if done is not None and (unit := units.get(unit_uid)) is not None:
                _ended(unit, done, how=OBSERVED)
        closed += done is not None
    return closed


def settle_unreconciled(
    reconciled: Iterable[GPUUnit],
    *,
    cluster: str | None = None,
    span: tuple[int, int | None] | None = None,
) -> int:
    """The backstop's check of the meters of `cluster`'s units (the process's own cluster's by
    default) that a pass did not reconcile (ended units, whose pods' last states the observer
    did not read): the first pass marks them missing, the next closes them at the last time
    their pods were seen running. With `span` (after, upto), only the meters of units whose pk
    is in (after, upto]. Returns how many it closed."""
    seen = {unit.uid for unit in reconciled}
    after, upto = span or (0, None)
    among = selectors.list_unit_uids(
        cluster=cluster or settings.CLUSTER_NAME, after=after, upto=upto
    )
    leftover = [meter for uid, meter in ledger.open_meters(among).items() if uid not in seen]
    ledger.mark_missing(meter.unit_uid for meter in leftover if meter.missing_since is None)
    due = {meter.unit_uid: meter for meter in leftover if meter.missing_since is not None}
    closed = 0
    for unit in GPUUnit.objects.filter(uid__in=list(due)):
        with transaction.atomic():
            if done := ledger.close_meter(unit.uid, at=None, pod_uid=due[unit.uid].pod_uid):
                closed += 1
                _ended(unit, done, how=LAST_SEEN)
    return closed


def held_in_cluster(cluster: str) -> list[tuple[str, str, str, datetime]]:
    """What `cluster` says the units' pods hold now: (unit uid, unit name, pod uid, first
    container start) of each live unit's pod that holds its allocated devices (one list call
    for pods, one for claims; runtime/usage_audit.py `audit_pods` compares it with the
    meters)."""
    with kube.using(cluster):
        pods = kube.list_objects(kube.POD, label_selector=manifests.OURS_SELECTOR)
        claims = kube.list_objects(kube.RESOURCECLAIM, label_selector=manifests.OURS_SELECTOR)
    by_name = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    pod_of = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    held = []
    for unit in selectors.list_units_to_reconcile(cluster=cluster):
        pod = pod_of.get((unit.namespace, manifests.pod_name_for(unit.name)))
        claim = by_name.get((unit.namespace, unit.claim_name))
        since = held_since(pod, claim)
        if pod is None or since is None or released_at(pod, gone=False) is not None:
            continue
        held.append((str(unit.uid), unit.name, pod["metadata"]["uid"], since))
    return held
