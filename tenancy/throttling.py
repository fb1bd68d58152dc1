"""Per-API-key request rate limit, shared by every web process through Redis
(controlplane.ratelimit's fixed-window counter)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from rest_framework.throttling import BaseThrottle

from controlplane import ratelimit

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.views import APIView


class ApiKeyRateThrottle(BaseThrottle):
    def allow_request(self, request: Request, view: APIView) -> bool:
        prefix = getattr(getattr(request, "auth", None), "prefix", None)
        if not prefix:
            return True  # unauthenticated requests are refused before they cost anything
        self._wait = ratelimit.count_request(f"throttle:{prefix}", rate=settings.API_THROTTLE_RATE)
        return self._wait is None

    def wait(self) -> float | None:
        return getattr(self, "_wait", None)
