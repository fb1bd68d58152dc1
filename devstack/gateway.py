"""The development gateway's data plane (run by devstack/agent.py): an HTTP server standing for
the address of the development cluster's Gateways (one listener port, 80, served on a local
port of its own), routing every request by Host through HTTPRoute -> Service -> ready pod
with devstack.gatewayapi over the cluster's own objects, read from its API server. No
container runs behind a pod (KWOK), so where a real gateway would connect to the pod it
answers 503 with a page naming what it reached."""

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

from devstack.gatewayapi import Decision, Obj, Request, decide, request_host
from devstack.kubeapi import Api, ApiError

logger = logging.getLogger(__name__)

# Bodies of requests are read and dropped; a larger one closes the connection instead.
MAX_DRAINED_BODY = 1 << 20
# Closing words of the page, by what the gateway found.
_FOOTERS = {
    "NoProcess": (
        "This is the development cluster's gateway: the routing above is the Gateway API's, "
        "over the cluster's own objects, but KWOK runs no containers behind its pods. On a "
        "real cluster the unit's process answers here."
    ),
    "NoHealthyUpstream": (
        "A real gateway answers 503 too while no pod behind the Service is Running and Ready."
    ),
}
_DEFAULT_FOOTER = (
    "This is the development cluster's gateway, routing as a Gateway API gateway does."
)


# The store keys devstack.gatewayapi names, and the kinds they are.
_KINDS = {
    "namespaces": ("v1", "Namespace"),
    "services": ("v1", "Service"),
    "pods": ("v1", "Pod"),
    "gatewayclasses.gateway.networking.k8s.io": ("gateway.networking.k8s.io/v1", "GatewayClass"),
    "gateways.gateway.networking.k8s.io": ("gateway.networking.k8s.io/v1", "Gateway"),
    "httproutes.gateway.networking.k8s.io": ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    "referencegrants.gateway.networking.k8s.io": (
        "gateway.networking.k8s.io/v1beta1",
        "ReferenceGrant",
    ),
}


class ApiObjects:
    """`gatewayapi.Objects` read from the API server, each kind listed once per request; a
    kind the cluster does not serve lists as empty."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._lists: dict[tuple[str, str | None], Sequence[Obj]] = {}

    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        return next(
            (obj for obj in self.list(resource, namespace) if obj["metadata"]["name"] == name),
            None,
        )

    def list(self, resource: str, namespace: str | None = None) -> Sequence[Obj]:
        key = (resource, namespace)
        if key not in self._lists:
            api_version, kind = _KINDS[resource]
            try:
                self._lists[key] = self.api.list(api_version, kind, namespace)
            except ApiError as error:
                if error.status != 404:
                    raise
                self._lists[key] = []
        return self._lists[key]


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

    def __init__(self, address: tuple[str, int], api: Api, listener_port: int) -> None:
        super().__init__(address, GatewayHandler)
        self.api = api
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
    server_version = "devstack-gateway"
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
        try:
            decision = decide(
                ApiObjects(self.server.api),
                port=self.server.listener_port,
                request=request,
                turn=self.server.next_turn(),
            )
        except (ApiError, OSError) as error:
            decision = Decision(
                503,
                "ClusterUnavailable",
                f"The gateway could not read the cluster's routes: {error}",
                (),
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


class Gateway:
    """The data plane on a thread: the Gateways' `listener_port` served on 127.0.0.1:`port`
    (0 picks a free one)."""

    def __init__(self, api: Api, *, port: int = 0, listener_port: int = 80) -> None:
        self.api = api
        self.host = "127.0.0.1"
        self.port = port
        self.listener_port = listener_port
        self._server: GatewayServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Gateway:
        self._server = GatewayServer((self.host, self.port), self.api, self.listener_port)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="devstack-gateway",
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
