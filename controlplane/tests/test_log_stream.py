"""A followed log's stream (controlplane.kube.logs.LogStream) against servers that misbehave:
one that ignores limitBytes is cut at the limit, one that falls silent is cut at the deadline,
and a stream closed before it was read hangs up."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import urllib3

from controlplane.kube import logs as kube_logs


class FakeResponse:
    """A urllib3 response whose server sends `chunks` and then, without `then_silent`, the
    same forever; with it, nothing more until the read side is shut (as a stalled server)."""

    def __init__(self, chunks: list[bytes], *, then_silent: bool) -> None:
        self.chunks = chunks
        self.then_silent = then_silent
        self.shut = threading.Event()
        self.closed = False

    def stream(self, amount: int, decode_content: bool) -> Iterator[bytes]:
        while True:
            yield from self.chunks
            if self.then_silent:
                self.shut.wait()
                raise urllib3.exceptions.ProtocolError("Response ended prematurely")

    def shutdown(self) -> None:
        self.shut.set()

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass


def test_a_server_that_ignores_the_byte_limit_is_cut_at_it():
    response = FakeResponse([b"x" * 60], then_silent=False)
    stream = kube_logs.LogStream(
        response, "ns/pod", deadline=time.monotonic() + 60, limit_bytes=150
    )
    assert b"".join(stream) == b"x" * 150
    assert response.closed


def test_a_server_that_falls_silent_is_cut_at_the_deadline():
    """A chunk, then nothing: the read waiting for the next chunk ends at the deadline (the
    watchdog shuts the read side), not a read timeout later."""
    response = FakeResponse([b"last words\n"], then_silent=True)
    stream = kube_logs.LogStream(
        response, "ns/pod", deadline=time.monotonic() + 0.3, limit_bytes=None
    )
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(stream))
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert chunks == [b"last words\n"]
    assert response.shut.is_set()
    assert response.closed


def test_closing_a_stream_never_read_hangs_up():
    response = FakeResponse([b"unread"], then_silent=True)
    stream = kube_logs.LogStream(
        response, "ns/pod", deadline=time.monotonic() + 60, limit_bytes=None
    )
    stream.close()
    assert response.closed
