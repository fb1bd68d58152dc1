"""A pod's log through the client's log API (`read_namespaced_pod_log`): all at once, or
followed as it grows. Errors are classified like every other call (404: no such pod; 400: the
container is not running or must be named, with the kubelet's message)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass

import urllib3
from kubernetes import client

from controlplane import metrics
from controlplane.kube.client import _outcome, api_client
from controlplane.kube.errors import KubeError, TemporaryError, classify


@dataclass(frozen=True)
class LogOptions:
    container: str = ""
    tail_lines: int | None = None
    since_seconds: int | None = None
    timestamps: bool = False
    limit_bytes: int | None = None

    def as_kwargs(self) -> dict:
        options = {
            "container": self.container or None,
            "tail_lines": self.tail_lines,
            "since_seconds": self.since_seconds,
            "timestamps": self.timestamps or None,
            "limit_bytes": self.limit_bytes,
        }
        return {key: value for key, value in options.items() if value is not None}


def read(namespace: str, pod: str, options: LogOptions, *, timeout: float) -> bytes:
    """The log as it is now (bounded by `options.limit_bytes`)."""
    api = client.CoreV1Api(api_client())
    try:
        response = api.read_namespaced_pod_log(
            pod,
            namespace,
            _preload_content=False,
            _request_timeout=timeout,
            **options.as_kwargs(),
        )
        data: bytes = response.data  # type: ignore[attr-defined]  # the raw urllib3 response
    except Exception as exc:
        raise _counted(classify(exc)) from exc
    metrics.KUBE_REQUESTS.labels("log", "ok").inc()
    return data


def _counted(error: KubeError) -> KubeError:
    metrics.KUBE_REQUESTS.labels("log", _outcome(error.status or 0)).inc()
    return error


def follow(
    namespace: str, pod: str, options: LogOptions, *, connect_timeout: float, deadline: float
) -> LogStream:
    """Open the followed log (a refusal raises here) and return its chunks as the kubelet
    writes them, until the container stops, the server ends the stream, `options.limit_bytes`
    have come, or the monotonic `deadline` passes. The deadline holds whatever the server
    does: at it the connection's read side is shut, which ends a read waiting for the next
    chunk, so a stream that keeps sending and one that falls silent end alike."""
    remaining = max(deadline - time.monotonic(), 0.001)
    api = client.CoreV1Api(api_client())
    try:
        response = api.read_namespaced_pod_log(
            pod,
            namespace,
            follow=True,
            _preload_content=False,
            _request_timeout=(min(connect_timeout, remaining), remaining),
            **options.as_kwargs(),
        )
    except Exception as exc:
        raise _counted(classify(exc)) from exc
    metrics.KUBE_REQUESTS.labels("log", "ok").inc()
    # With _preload_content=False the client returns the urllib3 response, not the str its
    # signature says.
    return LogStream(
        response,  # type: ignore[arg-type]
        f"{namespace}/{pod}",
        deadline=deadline,
        limit_bytes=options.limit_bytes,
    )


class LogStream:
    """The chunks of a followed log. Its end, or closing it (even before the first chunk is
    read), hangs up: the connection is closed, never reused, as what is left of the stream
    would be read as the next response."""

    def __init__(
        self,
        response: urllib3.BaseHTTPResponse,
        where: str,
        *,
        deadline: float,
        limit_bytes: int | None,
    ) -> None:
        self._response = response
        self._watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), self._shut)
        self._watchdog.daemon = True
        self._watchdog.start()
        self._chunks = self._read(where, deadline, limit_bytes)

    def __iter__(self) -> LogStream:
        return self

    def __next__(self) -> bytes:
        return next(self._chunks)

    def close(self) -> None:
        self._chunks.close()
        self._hang_up()

    def _read(
        self, where: str, deadline: float, limit_bytes: int | None
    ) -> Generator[bytes, None, None]:
        left = limit_bytes  # a server that ignores limitBytes is cut here all the same
        try:
            for chunk in self._response.stream(4096, decode_content=True):
                if left is not None:
                    chunk = chunk[:left]
                    left -= len(chunk)
                if chunk:
                    yield chunk
                if left == 0 or time.monotonic() >= deadline:
                    return
        except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError):
            return
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if time.monotonic() >= deadline:
                return  # the watchdog shut the read side (seen as a TLS error on https)
            raise TemporaryError(f"log stream of {where} dropped: {exc}") from exc
        finally:
            self._hang_up()

    def _shut(self) -> None:
        """At the deadline: shut the read side, so a read waiting on the server returns."""
        # Already closed or released (the stream ended meanwhile): nothing left to end.
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            self._response.shutdown()

    def _hang_up(self) -> None:
        self._watchdog.cancel()
        self._response.close()
        self._response.release_conn()
