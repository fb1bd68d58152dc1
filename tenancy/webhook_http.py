"""Sending one webhook: the Standard Webhooks signature (standardwebhooks.com, spec v1), the
address rules that keep a tenant's URL from reaching inside (no SSRF), and the POST itself.

The address is checked on the addresses the name resolves to at send time, and the request
goes to the address checked (the Host header and TLS name are the URL's), so a name that
resolves to a public address when checked and to a private one a moment later (DNS
rebinding) still reaches only the checked one. Names are asked of the name servers with a
deadline (dnspython), and an attempt has one deadline from the first question to the last
byte kept. Redirects are never followed."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import certifi
import dns.exception
import dns.nameserver
import dns.resolver
from django.conf import settings

from controlplane import networks

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


# IPv6 ranges that carry (or stand for) an IPv4 address or an old local scope: refused whatever
# ops allow, since the address reached is not the one checked (RFC 6052, 8215, 4291, 3879).
_SPECIAL_V6 = [
    (ipaddress.ip_network("64:ff9b::/96"), "a NAT64 address"),
    (ipaddress.ip_network("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (ipaddress.ip_network("::ffff:0:0/96"), "an IPv4-mapped address"),
    (ipaddress.ip_network("::/96"), "an IPv4-compatible address"),
    (ipaddress.ip_network("fec0::/10"), "a site-local address"),
]
# In ::/96 but not IPv4-compatible: the unspecified address and loopback, judged as such.
_NOT_COMPATIBLE = (ipaddress.ip_address("::"), ipaddress.ip_address("::1"))


def _embedded(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a 6to4 or Teredo address leads to (RFC 3056, 4380)."""
    found = [address.sixtofour] if address.sixtofour is not None else []
    if address.teredo is not None:
        found += list(address.teredo)
    return found


def address_problem(address: Address, *, cluster: list[Network] | None = None) -> str | None:
    """Why a webhook may not be sent to `address`: it is not public (unless ops allow its
    range), or it is link-local, a special IPv6 form, a 6to4 or Teredo address leading to a
    non-public one, or in any registered cluster's ranges (never; `cluster`: those ranges,
    read here when not given)."""
    if cluster is None:
        cluster = _networks(networks.cluster_ranges())
    if address.version == 6:
        assert isinstance(address, ipaddress.IPv6Address)
        for network, what in _SPECIAL_V6:
            if address in network and address not in _NOT_COMPATIBLE:
                return f"{address}, which is {what}"
        for inner in _embedded(address):
            if problem := address_problem(inner, cluster=cluster):
                return f"{address}, which leads to {problem}"
    if any(address in network for network in _ALWAYS_REFUSED):
        return f"{address}, which is link-local (metadata services live there)"
    if any(address in network for network in cluster):
        return f"{address}, which is in a cluster's own ranges"
    if address.is_multicast or address.is_unspecified:
        return f"{address}, which is not a host's address"
    if any(address in network for network in _networks(settings.WEBHOOK_ALLOWED_NETWORKS)):
        return None
    if not address.is_global:
        return f"{address}, which is not a public address"
    return None


def addresses_problem(addresses: Iterable[Address]) -> str | None:
    """The first of `addresses`' problems (the clusters' ranges read once), or None."""
    cluster = _networks(networks.cluster_ranges())
    for address in addresses:
        if problem := address_problem(address, cluster=cluster):
            return problem
    return None


def allowed_privately(address: Address) -> bool:
    """Whether `address` is reached only because ops allow its range (it is not public): what
    such a receiver answers is not shown to the tenant."""
    return not address.is_global and any(
        address in network for network in _networks(settings.WEBHOOK_ALLOWED_NETWORKS)
    )


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
    return host_problem(parts.hostname)


class ResolveError(Exception):
    """The host names no address, or its name servers did not answer in time."""


def host_problem(host: str) -> str | None:
    """Why `host` is not an address or a valid DNS name (an empty or over-long label)."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    try:
        ascii_host = host.encode("idna").decode()
    except UnicodeError:
        return "names a host that is not a valid DNS name"
    labels = ascii_host.removesuffix(".").split(".")
    if len(ascii_host) > 253 or any(not label or len(label) > 63 for label in labels):
        return "names a host that is not a valid DNS name"
    return None


def _resolver() -> dns.resolver.Resolver:
    """The system's name servers, or WEBHOOK_DNS_SERVERS ("host" or "host:port") when set."""
    if not settings.WEBHOOK_DNS_SERVERS:
        return dns.resolver.Resolver()
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = []
    for server in settings.WEBHOOK_DNS_SERVERS:
        host, _, port = server.rpartition(":") if server.count(":") == 1 else (server, "", "")
        resolver.nameservers.append(
            dns.nameserver.Do53Nameserver(host, port=int(port) if port else 53)
        )
    return resolver


def resolve(url: str, *, deadline: float) -> list[Address]:
    """The addresses `url`'s host names now, asked of the name servers for at most `deadline`
    seconds in all (dnspython: never the blocking system resolver, whose own timeouts a
    silent name server multiplies). `localhost` names loopback and `.invalid` names nothing
    (RFC 6761) without a question. Raises ResolveError."""
    host = urlsplit(url).hostname or ""
    try:
        return [ipaddress.ip_address(host.split("%")[0])]
    except ValueError:
        pass
    name = host.lower().removesuffix(".")
    if name == "localhost" or name.endswith(".localhost"):
        return [ipaddress.ip_address("127.0.0.1")]
    if name == "invalid" or name.endswith(".invalid"):
        raise ResolveError("its host does not resolve (the .invalid domain names nothing)")
    try:
        answer = _resolver().resolve_name(name, lifetime=deadline, search=False)
    except dns.resolver.LifetimeTimeout:
        raise ResolveError(
            f"its host's name servers did not answer within {deadline:g} s"
        ) from None
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, dns.resolver.NoNameservers):
        raise ResolveError("its host does not resolve (no address for the name)") from None
    except dns.exception.DNSException as error:
        raise ResolveError(f"its host does not resolve ({error})") from None
    found: list[Address] = []
    for text in answer.addresses():
        address = ipaddress.ip_address(text)
        if address not in found:
            found.append(address)
    if not found:
        raise ResolveError("its host does not resolve (no address for the name)")
    return found


def target_problem(url: str) -> str | None:
    """Why `url` cannot be sent to now: its text, or any address its host resolves to (the
    name servers asked for at most WEBHOOK_DNS_TIMEOUT_SECONDS)."""
    if problem := url_problem(url):
        return problem
    try:
        addresses = resolve(url, deadline=settings.WEBHOOK_DNS_TIMEOUT_SECONDS)
    except ResolveError as error:
        return str(error)
    if problem := addresses_problem(addresses):
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
    """POST `body` to `url` at an address checked by `address_problem`, the whole attempt
    (resolving, connecting, sending, the status, headers and the start of the body) within
    `timeout` seconds however slowly the receiver answers: at the deadline the socket is shut
    from a timer, so a receiver that drips a byte at a time is cut off too. Never raises for
    what the network or the receiver does (that is the Answer's error). What a receiver in a
    range only ops allow answers is not kept (the tenant sees it)."""
    started = time.monotonic()
    deadline = started + timeout

    def left() -> float:
        return max(deadline - time.monotonic(), 0.001)

    def answer(status: int | None, error: str = "", response: str = "") -> Answer:
        elapsed = int((time.monotonic() - started) * 1000)
        return Answer(status, error[:500], response[:RESPONSE_KEPT], elapsed)

    if problem := url_problem(url):
        return answer(None, f"refused: the URL {problem}")
    try:
        addresses = resolve(url, deadline=min(settings.WEBHOOK_DNS_TIMEOUT_SECONDS, timeout))
    except ResolveError as error:
        return answer(None, f"refused: {error}")
    if problem := addresses_problem(addresses):
        return answer(None, f"refused: the host resolves to {problem}")
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    address = addresses[0]
    try:
        raw = socket.create_connection((str(address), port), timeout=left())
    except OSError as error:
        return answer(None, f"cannot connect: {error.strerror or error}")
    held: list[socket.socket] = [raw]
    fired = threading.Event()
    cut = threading.Timer(left(), _shut, args=(held, fired))
    cut.daemon = True
    cut.start()
    connection = http.client.HTTPConnection(host, port, timeout=left())
    try:
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=certifi.where())
            held[0] = context.wrap_socket(raw, server_hostname=host)
        connection.sock = held[0]
        connection.request(
            "POST", path, body=body, headers={**headers, "host": parts.netloc.rpartition("@")[2]}
        )
        response = connection.getresponse()
        text = response.read(RESPONSE_KEPT).decode(errors="replace")
        status = response.status
    except (OSError, http.client.HTTPException) as error:
        if fired.is_set():
            return answer(None, f"no whole answer within {timeout:g} s")
        return answer(None, f"{type(error).__name__}: {error}")
    finally:
        cut.cancel()
        connection.close()
        held[0].close()
    if fired.is_set():  # cut off mid-answer: what was read is not the receiver's whole word
        return answer(None, f"no whole answer within {timeout:g} s")
    if allowed_privately(address):
        text = ""  # an in-house receiver ops allow: its answer is not the tenant's to read
    if 300 <= status < 400:
        return answer(status, "a redirect (not followed)", text)
    return answer(status, "" if 200 <= status < 300 else "not 2xx", text)


def _shut(held: list[socket.socket], fired: threading.Event) -> None:
    """The attempt's deadline: whatever the sender thread waits on returns."""
    fired.set()
    with contextlib.suppress(OSError):
        held[0].shutdown(socket.SHUT_RDWR)


def retry_delay(attempts: int) -> float:
    """Seconds before the try after `attempts` failed ones: the first delay, tripled each
    time, capped."""
    first = settings.WEBHOOK_RETRY_FIRST_SECONDS
    return float(min(first * 3 ** max(attempts - 1, 0), settings.WEBHOOK_RETRY_MAX_SECONDS))
