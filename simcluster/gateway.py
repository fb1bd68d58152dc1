"""The simulated gateway's data plane: an HTTP server standing for the address the simulated
Gateways report (one listener port, 80 by default, on a local port of its own), routing
every request by Host through HTTPRoute -> Service -> ready pod with simcluster.gatewayapi.
No container runs, so where a real gateway would connect to the pod it answers 503 with a
page naming what it reached."""

from __future__ import annotations

import html
import itertools
import logging
import sys
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from simcluster.gatewayapi import Decision, Obj, Request, decide, request_host
from simcluster.store import Store

logger = logging.getLogger(__name__)

# Bodies of requests are read and dropped; a larger one closes the connection instead.
MAX_DRAINED_BODY = 1 << 20
# Closing words of the page, by what the gateway found.
_FOOTERS = {
    "NoProcess": (
        "This is the simulated cluster's gateway: the routing above is the Gateway API's, over "
        "the cluster's own objects, but the simulated cluster runs no containers. On a real "
        "cluster the unit's process answers here."
    ),
    "NoHealthyUpstream": (
        "A real gateway answers 503 too while no pod behind the Service is Running and Ready."
    ),
}
_DEFAULT_FOOTER = "This is the simulated cluster's gateway, routing as a Gateway API gateway does."


class StoreObjects:
    """`gatewayapi.Objects` over the store's own objects (read-only), kinds it does not serve
    listing as empty."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        if self.store.registry.get(resource) is None:
            return None
        return self.store.get_shared(resource, namespace, name)

    def list(self, resource: str, namespace: str | None = None) -> Sequence[Obj]:
        if self.store.registry.get(resource) is None:
            return []
        return self.store.list_shared(resource, namespace)[0]


def render(decision: Decision, *, html_page: bool) -> tuple[str, bytes]:
    """The page for a decision: HTML for browsers, plain text for curl and scripts."""
    phrase = HTTPStatus(decision.status).phrase
    footer = _FOOTERS.get(decision.reason, _DEFAULT_FOOTER)
    width = max((len(label) for label, _ in decision.reached), default=0)
    if not html_page:
        lines = [f"{decision.status} {phrase}", "", decision.summary, ""]
        lines += [f"  {label.ljust(width)}  {value}" for label, value in decision.reached]
        lines += ["", footer, ""]
        return "text/plain; charset=utf-8", "\n".join(lines).encode()
    rows = "".join(
        f"<tr><th>{html.escape(label)}</th><td>{html.escape(value)}</td></tr>"
        for label, value in decision.reached
    )
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{decision.status} {html.escape(phrase)}</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2rem;max-width:60rem}"
        "th{text-align:left;padding-right:1rem;vertical-align:top}td{font-family:monospace}"
        "</style></head><body>"
        f"<h1>{decision.status} {html.escape(phrase)}</h1>"
        f"<p>{html.escape(decision.summary)}</p>"
        f"<table>{rows}</table><p>{html.escape(footer)}</p></body></html>\n"
    )
    return "text/html; charset=utf-8", page.encode()


class GatewayServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], store: Store, listener_port: int) -> None:
        super().__init__(address, GatewayHandler)
        self.store = store
        self.listener_port = listener_port
        self._turns = itertools.count()
        self._turn_lock = threading.Lock()

    def next_turn(self) -> int:
        with self._turn_lock:
            return next(self._turns)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class GatewayHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "simcluster-gateway"
    sys_version = ""
    server: GatewayServer

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("gateway %s", format % args)

    def __getattr__(self, name: str) -> Any:
        # Every method is routed alike (do_GET, do_POST, do_PROPFIND...).
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def _serve(self) -> None:
        self._drain_body()
        target = urlsplit(self.path)
        request = Request(
            host=request_host(self.headers.get("Host", "")),
            path=target.path or "/",
            method=self.command,
            headers={name.lower(): value for name, value in self.headers.items()},
            query=dict(parse_qsl(target.query, keep_blank_values=True)),
        )
        store = self.server.store
        with store.lock:  # one consistent view of the objects, as a programmed proxy has
            decision = decide(
                StoreObjects(store),
                port=self.server.listener_port,
                request=request,
                turn=self.server.next_turn(),
            )
        content_type, body = render(
            decision, html_page="text/html" in self.headers.get("Accept", "")
        )
        self.send_response(decision.status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _drain_body(self) -> None:
        """Read the request's body (a keep-alive connection's next request follows it)."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = MAX_DRAINED_BODY + 1
        if length > MAX_DRAINED_BODY:
            self.close_connection = True
        elif length > 0:
            self.rfile.read(length)


class SimGateway:
    """The data plane on a thread: `listener_port` (the Gateways' listener port it stands
    for) served on host:port (0 picks a free one)."""

    def __init__(
        self, store: Store, *, host: str = "127.0.0.1", port: int = 0, listener_port: int = 80
    ) -> None:
        self.store = store
        self.host = host
        self.port = port
        self.listener_port = listener_port
        self._server: GatewayServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> SimGateway:
        self._server = GatewayServer((self.host, self.port), self.store, self.listener_port)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="simcluster-gateway",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
