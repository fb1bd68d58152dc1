"""Caps on streams held open at once (followed logs): per web process in memory, per tenant
and in total across every web process through Redis. A slot is a lease that expires by itself,
so slots held by a process killed mid-stream come back when their leases run out."""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from dataclasses import dataclass

import redis

from controlplane.ratelimit import redis_client

logger = logging.getLogger(__name__)

# KEYS: the tenant's leases, everyone's (sorted sets: token -> expiry, in the server's clock).
# ARGV: token, per-tenant cap, total cap, lease seconds. Expired leases are dropped first; a
# refusal says which cap (1: tenant, 2: total) and when its oldest lease ends at the latest.
_TAKE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
local caps = {tonumber(ARGV[2]), tonumber(ARGV[3])}
local seconds = tonumber(ARGV[4])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', t)
end
for i, key in ipairs(KEYS) do
  if redis.call('ZCARD', key) >= caps[i] then
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local wait = 0
    if oldest[2] then wait = tonumber(oldest[2]) - t end
    return {i, tostring(wait)}
  end
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, t + seconds, ARGV[1])
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', key, math.ceil(tonumber(last[2]) * 1000) + 1000)
end
return {0, '0'}
"""
_SCOPES = {1: "tenant", 2: "total"}
# KEYS: one set of leases. The leases in it that have not expired.
_COUNT = """
local now = redis.call('TIME')
return redis.call('ZCOUNT', KEYS[1], '(' .. (tonumber(now[1]) + tonumber(now[2]) / 1000000), '+inf')
"""


@dataclass(frozen=True)
class Lease:
    tenant_key: str
    token: str


@dataclass(frozen=True)
class Refusal:
    scope: str  # "process", "tenant" or "total": the cap that is reached
    cap: int
    retry_after: int  # whole seconds until a slot frees at the latest (at least 1)


class Slots:
    """The slots of one kind of stream. A process keeps at most `per_process` (its threads are
    what a stream holds); Redis keeps `per_tenant` and `total` across processes. Every taken
    lease is given back once, when its stream ends; one not given back expires after the
    `seconds` it was taken for."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._lock = threading.Lock()
        self._local: dict[str, float] = {}  # token -> monotonic end of this process's leases

    def take(
        self, tenant_key: str, *, per_process: int, per_tenant: int, total: int, seconds: float
    ) -> Lease | Refusal:
        token = secrets.token_hex(8)
        # The tenant's and everyone's caps first, so that a tenant at its cap is told so
        # whichever process it reaches; a process refusal gives the shared lease back.
        refusal = self._take_shared(tenant_key, token, per_tenant, total, seconds)
        if refusal is not None:
            return refusal
        lease = Lease(tenant_key, token)
        with self._lock:
            now = time.monotonic()
            if len(self._local) < per_process:
                self._local[token] = now + seconds
                return lease
            first_end = min(self._local.values(), default=now)
        self.give_back(lease)
        return Refusal("process", per_process, _whole(first_end - now))

    def give_back(self, lease: Lease) -> None:
        self._forget(lease.token)
        try:
            pipeline = redis_client().pipeline(transaction=False)
            for key in self._keys(lease.tenant_key):
                pipeline.zrem(key, lease.token)
            pipeline.execute()
        except redis.RedisError:
            logger.warning("%s slot not given back; its lease will expire", self.kind)

    def held(self) -> int:
        """Slots this process holds now."""
        with self._lock:
            return len(self._local)

    def held_by(self, tenant_key: str) -> int | None:
        """Slots the tenant holds now across processes (None when Redis cannot say)."""
        try:
            return int(redis_client().eval(_COUNT, 1, self._keys(tenant_key)[0]))
        except redis.RedisError:
            logger.warning("%s slots unavailable", self.kind)
            return None

    def _take_shared(
        self, tenant_key: str, token: str, per_tenant: int, total: int, seconds: float
    ) -> Refusal | None:
        try:
            scope, wait = redis_client().eval(
                _TAKE, 2, *self._keys(tenant_key), token, per_tenant, total, seconds
            )
        except redis.RedisError:
            # A guard, not a dependency (as the rate limiter): without Redis only this
            # process's cap holds, which is the one that keeps its threads free.
            logger.warning("%s slots unavailable; only the process cap applies", self.kind)
            return None
        if not scope:
            return None
        cap = per_tenant if scope == 1 else total
        return Refusal(_SCOPES[scope], cap, _whole(float(wait)))

    def _keys(self, tenant_key: str) -> tuple[str, str]:
        # One hash tag: both keys live on one node of a Redis Cluster, as a script needs.
        return f"slots:{{{self.kind}}}:tenant:{tenant_key}", f"slots:{{{self.kind}}}:total"

    def _forget(self, token: str) -> None:
        with self._lock:
            self._local.pop(token, None)


def _whole(seconds: float) -> int:
    return max(1, math.ceil(seconds))
