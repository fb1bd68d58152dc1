"""Request rate limits shared by every web process through Redis, and the client address the
per-address ones count against (the same address login throttling counts against).

A fixed-window counter: one INCR (plus EXPIRE) per request in a single round trip, and O(1)
state per key, where DRF's SimpleRateThrottle reads and rewrites a pickled list of every
request in the window. A limiter is a guard, not a dependency: with Redis gone, requests are
served."""

from __future__ import annotations

import ipaddress
import logging
import threading
import time

import redis
from django.conf import settings
from django.http import HttpRequest

logger = logging.getLogger(__name__)

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_client: redis.Redis | None = None
_client_lock = threading.Lock()


def parse_rate(rate: str) -> tuple[int, int]:
    """ "1200/min" -> (1200, 60)."""
    count, _, period = rate.partition("/")
    return int(count), _PERIODS[period.strip()[0]]


def redis_client() -> redis.Redis:
    """The Redis that limits count in (the cache's): one client per process, with timeouts
    short enough that a Redis gone costs a request at most a second or two."""
    global _client
    with _client_lock:
        if _client is None:
            _client = redis.Redis.from_url(
                settings.CACHES["default"]["LOCATION"], socket_connect_timeout=1, socket_timeout=1
            )
        return _client


def count_request(key: str, *, rate: str) -> float | None:
    """Count one request against `key` under `rate` ("N/min"): None while the window holds at
    most N, else the seconds until the window ends (the client's Retry-After)."""
    limit, period = parse_rate(rate)
    now = time.time()
    window_key = f"{key}:{int(now // period)}"
    try:
        # One round trip for both; redis-py's types do not follow a pipeline's chaining.
        pipeline = redis_client().pipeline(transaction=False)
        pipeline.incr(window_key)
        pipeline.expire(window_key, period)
        count, _ = pipeline.execute()
    except redis.RedisError:
        logger.warning("rate limiter unavailable; request allowed", exc_info=True)
        return None
    return None if count <= limit else period - now % period


def client_address(request: HttpRequest) -> str:
    """The address of the client, seen past LOGIN_TRUSTED_PROXIES proxies: each appends the
    address it was reached from to X-Forwarded-For, so the n-th entry from the right is the one
    the outermost trusted proxy saw (entries left of it are whatever the client sent). A hop
    is believed only from an address in LOGIN_PROXY_NETWORKS: a client that reaches web
    directly (or through a proxy outside them) is its connection's address, whatever header it
    wrote."""
    remote = request.META.get("REMOTE_ADDR", "")
    hops = settings.LOGIN_TRUSTED_PROXIES
    if hops <= 0:
        return remote
    forwarded = [
        entry.strip()
        for entry in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if entry.strip()
    ]
    # Fewer entries than proxies: the request did not come through them, so trust none.
    if len(forwarded) < hops:
        return remote
    seen = remote
    for hop in range(1, hops + 1):
        if not _is_proxy(seen):
            return seen  # this address wrote what lies left of it: its own word
        seen = _without_port(forwarded[-hop])
    return seen


def _is_proxy(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(network) for network in settings.LOGIN_PROXY_NETWORKS)


def client_network(request: HttpRequest) -> str:
    """The client as the login throttle counts it (AXES_CLIENT_IP_CALLABLE): its IPv4
    address, or its IPv6 /64 written as the /64's first address (a host picks any address in
    its /64, so counting single IPv6 addresses would limit nothing; axes keeps an address)."""
    return _client_network(client_address(request)).removesuffix("/64")


def _without_port(entry: str) -> str:
    """Some proxies write the client's port too ("203.0.113.7:5678", "[2001:db8::7]:443"):
    a new connection would otherwise be a new client."""
    if entry.startswith("["):
        return entry[1:].partition("]")[0]
    return entry.partition(":")[0] if entry.count(":") == 1 else entry


def _client_network(address: str) -> str:
    """What one client is: its IPv4 address, or its IPv6 /64 (a host is handed a whole /64
    and picks any address in it, so counting single IPv6 addresses would limit nothing)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def count_address_request(request: HttpRequest, *, scope: str, rate: str) -> float | None:
    """count_request for the request's client address (or IPv6 /64) in `scope`."""
    return count_request(f"throttle:{scope}:{_client_network(client_address(request))}", rate=rate)
