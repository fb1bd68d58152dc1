"""Kubernetes failures sorted into what to do about them: retry later, or give up with a reason."""

from __future__ import annotations

import json

import urllib3
from kubernetes.client.exceptions import ApiException

# Status codes worth retrying: the server or the path to it is having trouble.
_TRANSIENT_STATUSES = {408, 425, 429, 500, 502, 503, 504}


class KubeError(Exception):
    """A failed Kubernetes call with the server's status, reason and message."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


class TemporaryError(KubeError):
    """Worth retrying after `delay` seconds (server error, throttling, unreachable)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", delay: float = 1.0):
        super().__init__(message, status=status, reason=reason)
        self.delay = delay


class PermanentError(KubeError):
    """Retrying cannot help; `reason` is a short CamelCase code a customer can read."""


def status_body(exc: ApiException) -> dict:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def classify(exc: Exception) -> KubeError:
    """Turn a client exception into a TemporaryError or a PermanentError."""
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException):
        body = status_body(exc)
        status = exc.status or 0
        message = body.get("message") or exc.reason or str(exc)
        reason = body.get("reason") or ""
        if status == 0 or status in _TRANSIENT_STATUSES:
            retry_after = (exc.headers or {}).get("Retry-After") if exc.headers else None
            delay = float(retry_after) if retry_after and str(retry_after).isdigit() else 1.0
            return TemporaryError(message, status=status, reason=reason, delay=delay)
        if status == 403 and "exceeded quota" in message:
            return PermanentError(message, status=status, reason="QuotaExceeded")
        if status == 403 and "error looking up service account" in message:
            # A namespace just made has no ServiceAccount for a moment, until the
            # controller-manager's serviceaccount controller makes "default", and the
            # ServiceAccount admission plugin refuses pods meanwhile.
            return TemporaryError(message, status=status, reason="ServiceAccountPending")
        if status == 422:
            return PermanentError(message, status=status, reason="InvalidSpec")
        if status == 403:
            return PermanentError(message, status=status, reason="Forbidden")
        return PermanentError(message, status=status, reason=reason or "KubernetesError")
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError | TimeoutError):
        return TemporaryError(f"cluster unreachable: {exc}", reason="Unreachable")
    raise exc
