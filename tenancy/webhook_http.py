"""Sending one webhook: the Standard Webhooks signature (standardwebhooks.com, spec v1), the
address rules that keep a tenant's URL from reaching inside (no SSRF), and the POST itself.

The address is checked on the addresses the name resolves to at send time, and the request
goes to the address checked (the Host header and TLS name are the URL's), so a name that
resolves to a public address when checked and to a private one a moment later (DNS
rebinding) still reaches only the checked one. Redirects are never followed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import certifi
import urllib3
from django.conf import settings

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
RESPONSE_KEPT = 1000
USER_AGENT = "gpu-control-plane-webhooks/1"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# Refused even inside a range ops allow: cloud metadata and other link-local services.
_ALWAYS_REFUSED = [ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10")]


def new_secret() -> str:
    """A signing secret as Standard Webhooks writes one: `whsec_` and 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def sign(secret: str, *, message_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256>` of `<id>.<timestamp>.<body>` under `secret`."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(
    signing_secrets: Iterable[str], *, message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The Standard Webhooks headers; one signature per secret (the new and, during a
    rotation's overlap, the previous), space-separated, any of which verifies."""
    signatures = " ".join(
        sign(secret, message_id=message_id, timestamp=timestamp, body=body)
        for secret in signing_secrets
    )
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signatures,
        "content-type": "application/cloudevents+json",
        "user-agent": USER_AGENT,
    }


def _networks(names: Iterable[str]) -> list[Network]:
    return [ipaddress.ip_network(name) for name in names]


def address_problem(address: Address) -> str | None:
    """Why a webhook may not be sent to `address`: it is not public (unless ops allow its
    range), or it is link-local or one of the cluster's own ranges (never)."""
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    cluster = _networks(
        [
            *settings.CLUSTER_POD_CIDRS,
            *settings.CLUSTER_SERVICE_CIDRS,
            *settings.CLUSTER_NODE_CIDRS,
        ]
    )
    if any(address in network for network in _ALWAYS_REFUSED):
        return f"{address}, which is link-local (metadata services live there)"
    if any(address in network for network in cluster):
        return f"{address}, which is in the cluster's own ranges"
    if address.is_multicast or address.is_unspecified:
        return f"{address}, which is not a host's address"
    if any(address in network for network in _networks(settings.WEBHOOK_ALLOWED_NETWORKS)):
        return None
    if not address.is_global:
        return f"{address}, which is not a public address"
    return None


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a webhook target, from its text alone: http(s), a host, no user
    or password in it, no fragment."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a port out of range)
    except ValueError as error:
        return f"not a URL: {error}"
    if parts.scheme not in ("http", "https"):
        return "must start with https:// (or http://)"
    if not parts.hostname:
        return "names no host"
    if parts.username is not None or parts.password is not None:
        return "must not carry a user or password: the signature authenticates the sender"
    if parts.fragment:
        return "must not have a #fragment"
    return None


def resolve(url: str) -> list[Address]:
    """The addresses `url`'s host names now (raises OSError when it names none)."""
    parts = urlsplit(url)
    assert parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    found: list[Address] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address not in found:
            found.append(address)
    return found


def target_problem(url: str) -> str | None:
    """Why `url` cannot be sent to now: its text, or any address its host resolves to."""
    if problem := url_problem(url):
        return problem
    try:
        addresses = resolve(url)
    except OSError as error:
        return f"its host does not resolve ({error.strerror or error})"
    for address in addresses:
        if problem := address_problem(address):
            return f"resolves to {problem}"
    return None


@dataclass(frozen=True)
class Answer:
    """What one attempt got: a status and the start of the body, or an error and no status."""

    status: int | None
    error: str
    response: str
    duration_ms: int

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def post(url: str, *, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
    """POST `body` to `url` at an address checked by `address_problem`; never raises for
    what the network or the receiver does (that is the Answer's error)."""
    started = time.monotonic()

    def answer(status: int | None, error: str = "", response: str = "") -> Answer:
        elapsed = int((time.monotonic() - started) * 1000)
        return Answer(status, error[:500], response[:RESPONSE_KEPT], elapsed)

    if problem := url_problem(url):
        return answer(None, f"refused: the URL {problem}")
    try:
        addresses = resolve(url)
    except OSError as error:
        return answer(None, f"the host does not resolve: {error.strerror or error}")
    for address in addresses:
        if problem := address_problem(address):
            return answer(None, f"refused: the host resolves to {problem}")
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = parts.path or "/"
    if parts.query:
        path += f"?{parts.query}"
    pool = _pool(parts.scheme, addresses, host=host, port=port, timeout=timeout)
    try:
        response = pool.urlopen(
            "POST",
            path,
            body=body,
            headers={**headers, "host": parts.netloc.rpartition("@")[2]},
            redirect=False,
            retries=False,
            assert_same_host=False,
            preload_content=False,
        )
        try:
            text = response.read(RESPONSE_KEPT, decode_content=True).decode(errors="replace")
        finally:
            response.release_conn()
    except urllib3.exceptions.HTTPError as error:
        return answer(None, f"{type(error).__name__}: {error}")
    finally:
        pool.close()
    if 300 <= response.status < 400:
        return answer(response.status, "a redirect (not followed)", text)
    return answer(response.status, "" if 200 <= response.status < 300 else "not 2xx", text)


def _pool(
    scheme: str, addresses: Sequence[Address], *, host: str, port: int, timeout: float
) -> urllib3.HTTPConnectionPool:
    """A pool connecting to the first checked address, naming `host` for TLS."""
    connect = urllib3.Timeout(connect=min(timeout, 5.0), read=timeout)
    address = str(addresses[0])
    if scheme == "https":
        return urllib3.HTTPSConnectionPool(
            address,
            port,
            timeout=connect,
            maxsize=1,
            cert_reqs="CERT_REQUIRED",
            ca_certs=certifi.where(),
            server_hostname=host,
            assert_hostname=host,
        )
    return urllib3.HTTPConnectionPool(address, port, timeout=connect, maxsize=1)


def retry_delay(attempts: int) -> float:
    """Seconds before the try after `attempts` failed ones: the first delay, tripled each
    time, capped."""
    first = settings.WEBHOOK_RETRY_FIRST_SECONDS
    return float(min(first * 3 ** max(attempts - 1, 0), settings.WEBHOOK_RETRY_MAX_SECONDS))
