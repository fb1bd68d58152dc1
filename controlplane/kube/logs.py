"""A pod's log through the client's log API (`read_namespaced_pod_log`): all at once, or
followed as it grows. Errors are classified like every other call (404: no such pod; 400: the
container is not running or must be named, with the kubelet's message)."""

from __future__ import annotations

from collections.abc import Iterator
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
    namespace: str, pod: str, options: LogOptions, *, connect_timeout: float, read_timeout: float
) -> Iterator[bytes]:
    """Open the followed log (a refusal raises here) and return its chunks as the kubelet
    writes them, until the container stops, the server ends the stream, or nothing arrives
    for `read_timeout` seconds (the stream then just ends). Close the iterator to hang up."""
    api = client.CoreV1Api(api_client())
    try:
        response = api.read_namespaced_pod_log(
            pod,
            namespace,
            follow=True,
            _preload_content=False,
            _request_timeout=(connect_timeout, read_timeout),
            **options.as_kwargs(),
        )
    except Exception as exc:
        raise _counted(classify(exc)) from exc
    metrics.KUBE_REQUESTS.labels("log", "ok").inc()
    # With _preload_content=False the client returns the urllib3 response, not the str its
    # signature says.
    return _chunks(response, f"{namespace}/{pod}")  # type: ignore[arg-type]


def _chunks(response: urllib3.BaseHTTPResponse, where: str) -> Iterator[bytes]:
    try:
        yield from response.stream(4096, decode_content=True)
    except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError):
        return
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise TemporaryError(f"log stream of {where} dropped: {exc}") from exc
    finally:
        response.release_conn()
