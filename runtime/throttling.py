"""Per-API-key request rate limit, shared by every web process through the cache (Redis)."""

from __future__ import annotations

import logging

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

logger = logging.getLogger(__name__)


class ApiKeyRateThrottle(SimpleRateThrottle):
    scope = "api_key"

    def get_rate(self) -> str:
        # Read at request time (not import time), so the setting can change without a restart.
        return settings.API_THROTTLE_RATE

    def get_cache_key(self, request, view) -> str | None:
        api_key = getattr(request, "auth", None)
        prefix = getattr(api_key, "prefix", None)
        return self.cache_format % {"scope": self.scope, "ident": prefix} if prefix else None

    def allow_request(self, request, view) -> bool:
        try:
            return super().allow_request(request, view)
        except Exception:
            # The limiter is a guard, not a dependency: if its store is down, serve the request.
            logger.warning("rate limiter unavailable; request allowed", exc_info=True)
            return True
