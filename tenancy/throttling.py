"""Per-API-key request rate limit, shared by every web process through Redis.

A fixed-window counter: one INCR (plus EXPIRE) per request in a single round trip, and O(1)
state per key, where DRF's SimpleRateThrottle reads and rewrites a pickled list of every
request in the window."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import redis
from django.conf import settings
from rest_framework.throttling import BaseThrottle

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.views import APIView

logger = logging.getLogger(__name__)

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_client: redis.Redis | None = None
_client_lock = threading.Lock()


def parse_rate(rate: str) -> tuple[int, int]:
    """ "1200/min" -> (1200, 60)."""
    count, _, period = rate.partition("/")
    return int(count), _PERIODS[period.strip()[0]]


def _redis() -> redis.Redis:
    global _client
    with _client_lock:
        if _client is None:
            _client = redis.Redis.from_url(
                settings.CACHES["default"]["LOCATION"], socket_connect_timeout=1, socket_timeout=1
            )
        return _client


class ApiKeyRateThrottle(BaseThrottle):
    def allow_request(self, request: Request, view: APIView) -> bool:
        prefix = getattr(getattr(request, "auth", None), "prefix", None)
        if not prefix:
            return True  # unauthenticated requests are refused before they cost anything
        limit, period = parse_rate(settings.API_THROTTLE_RATE)
        now = time.time()
        key = f"throttle:{prefix}:{int(now // period)}"
        try:
            # One round trip for both; redis-py's types do not follow a pipeline's chaining.
            pipeline = _redis().pipeline(transaction=False)
            pipeline.incr(key)
            pipeline.expire(key, period)
            count, _ = pipeline.execute()
        except redis.RedisError:
            # The limiter is a guard, not a dependency: if Redis is down, serve the request.
            logger.warning("rate limiter unavailable; request allowed", exc_info=True)
            return True
        self._wait = period - now % period
        return count <= limit

    def wait(self) -> float | None:
        return getattr(self, "_wait", None)
