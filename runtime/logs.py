"""A unit's log: its pod's, read through the cluster's log API for the API and the dashboard.
No pod (never created, or gone) is a 404; a container the pod lacks is a 400 naming the field;
one that is not running yet is a 409 `logs_unavailable` with the kubelet's own words."""

from __future__ import annotations

import time
from collections.abc import Iterator

from django.conf import settings

from controlplane.errors import DomainError, InvalidRequest, NotFound
from controlplane.kube import logs as kube_logs
from controlplane.kube.errors import KubeError
from runtime import manifests
from runtime.models import GPUUnit, UnitPhase


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
    return manifests.pod_name_for(unit.name)


def read(unit: GPUUnit, options: kube_logs.LogOptions) -> bytes:
    pod = _pod(unit)
    try:
        return kube_logs.read(unit.namespace, pod, options, timeout=settings.KUBE_REQUEST_TIMEOUT)
    except KubeError as exc:
        raise _refusal(unit, exc) from exc


def follow(unit: GPUUnit, options: kube_logs.LogOptions) -> Iterator[bytes]:
    """The log so far, then new chunks, for at most LOGS_FOLLOW_SECONDS. The stream is opened
    here, so a refusal is still a JSON answer, not a broken stream."""
    pod = _pod(unit)
    deadline = time.monotonic() + settings.LOGS_FOLLOW_SECONDS
    try:
        chunks = kube_logs.follow(
            unit.namespace,
            pod,
            options,
            connect_timeout=settings.KUBE_REQUEST_TIMEOUT,
            read_timeout=settings.LOGS_FOLLOW_SECONDS,
        )
    except KubeError as exc:
        raise _refusal(unit, exc) from exc
    return _until(deadline, chunks)


def _until(deadline: float, chunks: Iterator[bytes]) -> Iterator[bytes]:
    try:
        for chunk in chunks:
            yield chunk
            if time.monotonic() >= deadline:
                return
    except KubeError:
        return  # the stream dropped: the client has what there was
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
