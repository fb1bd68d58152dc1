"""A unit's log: its pod's, read through the cluster's log API for the API and the dashboard.
No pod (never created, or gone) is a 404; a container the pod lacks is a 400 naming the field;
one that is not running yet is a 409 `logs_unavailable` with the kubelet's own words."""

from __future__ import annotations

import dataclasses
import time

from django.conf import settings

from controlplane import kube
from controlplane.errors import DomainError, InvalidRequest, NotFound, Throttled
from controlplane.kube import logs as kube_logs
from controlplane.kube.errors import KubeError
from controlplane.slots import Lease, Refusal, Slots
from runtime import manifests
from runtime.models import GPUUnit, UnitPhase
from tenancy.models import Tenant

# Followed logs open at once, capped (settings LOGS_FOLLOWERS_*); one per process.
FOLLOWERS = Slots("logs-follow")
_LEASE_MARGIN = 5.0


class LogsUnavailable(DomainError):
    code = "logs_unavailable"


def _refusal(unit: GPUUnit, exc: KubeError) -> DomainError:
    if exc.status == 404:
        return NotFound(f"gpu unit {unit.name} has no pod (phase {unit.phase}).")
    if exc.status == 400 and (
        "is not valid for pod" in exc.message or "choose one of" in exc.message
    ):
        return InvalidRequest(
            f"the unit's pod has no such container: {exc.message}",
            details={"fields": {"container": [exc.message]}},
        )
    if exc.status == 400:
        return LogsUnavailable(f"no log yet: {exc.message}")
    return DomainError(f"the cluster did not give the log: {exc.message}")


def _pod(unit: GPUUnit) -> str:
    if unit.phase == UnitPhase.TERMINATED:
        raise NotFound(f"gpu unit {unit.name} is terminated: its pod and log are gone.")
    if unit.at_rest:
        # The unit is there; its pod is not: a conflict with its state, not a missing unit.
        raise LogsUnavailable(
            f"gpu unit {unit.name} is {unit.phase}: it has no pod, so no log. Its log starts "
            "again when it is started (POST /gpu-units/{name}/start, gpuctl units start)."
        )
    return manifests.pod_name_for(unit.name)


def read(unit: GPUUnit, options: kube_logs.LogOptions) -> bytes:
    pod = _pod(unit)
    try:
        with kube.using(unit.cluster):
            return kube_logs.read(
                unit.namespace, pod, options, timeout=settings.KUBE_REQUEST_TIMEOUT
            )
    except KubeError as exc:
        raise _refusal(unit, exc) from exc


def follow(unit: GPUUnit, options: kube_logs.LogOptions) -> FollowedLog:
    """The log so far, then new chunks, until LOGS_FOLLOW_SECONDS or LOGS_FOLLOW_MAX_BYTES
    (whichever comes first, whatever the cluster sends). A follower takes a slot first (429
    `throttled` when the tenant's, everyone's or this process's followers are all open), and
    the stream is opened here, so a refusal is still a JSON answer, not a broken stream."""
    pod = _pod(unit)
    taken = FOLLOWERS.take(
        str(unit.tenant_id),  # the key followers_open reads
        per_process=settings.LOGS_FOLLOWERS_PER_PROCESS,
        per_tenant=settings.LOGS_FOLLOWERS_PER_TENANT,
        total=settings.LOGS_FOLLOWERS_TOTAL,
        # The stream, opening included, is over LOGS_FOLLOW_SECONDS after this; the margin
        # covers sending its last chunk. A lease outliving its process expires no later.
        seconds=settings.LOGS_FOLLOW_SECONDS + _LEASE_MARGIN,
    )
    if isinstance(taken, Refusal):
        raise _throttled(taken)
    deadline = time.monotonic() + settings.LOGS_FOLLOW_SECONDS
    try:
        with kube.using(unit.cluster):  # the stream keeps the connection it opened
            chunks = kube_logs.follow(
                unit.namespace,
                pod,
                dataclasses.replace(options, limit_bytes=settings.LOGS_FOLLOW_MAX_BYTES),
                connect_timeout=settings.KUBE_REQUEST_TIMEOUT,
                deadline=deadline,
            )
    except BaseException as exc:
        FOLLOWERS.give_back(taken)
        if isinstance(exc, KubeError):
            raise _refusal(unit, exc) from exc
        raise
    return FollowedLog(chunks, taken)


def followers_open(tenant: Tenant) -> int:
    """The tenant's followed logs open now, in every web process (0 when Redis cannot say)."""
    return FOLLOWERS.held_by(str(tenant.pk)) or 0


class FollowedLog:
    """A followed log as the response streams it. Its slot is given back exactly once: when
    the stream ends, or when it is closed (the client went away; or the response was never
    sent) — WSGI servers close what they were given, sent or not."""

    def __init__(self, chunks: kube_logs.LogStream, lease: Lease) -> None:
        self._chunks = chunks
        self._lease: Lease | None = lease

    def __iter__(self) -> FollowedLog:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._chunks)
        except StopIteration:
            self.close()
            raise
        except KubeError:
            self.close()  # the stream dropped: the client has what there was
            raise StopIteration from None

    def close(self) -> None:
        self._chunks.close()
        lease, self._lease = self._lease, None
        if lease is not None:
            FOLLOWERS.give_back(lease)


def _throttled(refusal: Refusal) -> Throttled:
    what = {
        "tenant": f"this tenant has {refusal.cap} followed logs open (LOGS_FOLLOWERS_PER_TENANT)",
        "total": f"{refusal.cap} followed logs are open in all (LOGS_FOLLOWERS_TOTAL)",
        "process": (
            f"this server has {refusal.cap} followed logs open, all it serves at once "
            "(LOGS_FOLLOWERS_PER_PROCESS)"
        ),
    }[refusal.scope]
    return Throttled(
        f"Too many followed logs: {what}; retry after {refusal.retry_after} s, or read the log "
        "without follow.",
        retry_after=refusal.retry_after,
        details={"limit": refusal.scope, "max": refusal.cap},
    )
