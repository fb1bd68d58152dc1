"""The dashboard's pages, its login page included, limited per client address
(DASHBOARD_RATE_PER_ADDRESS): past the limit a 429 page with Retry-After, before the view and
its session, database and cluster reads run. Static files are answered by WhiteNoise before
any of this (the liveness probe reads one); the admin and the API have guards of their own."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from controlplane import ratelimit

_PERIOD_NAMES = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}


class DashboardRateLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., HttpResponse],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        match = request.resolver_match
        if match is None or match.app_name != "dashboard":
            return None
        rate = settings.DASHBOARD_RATE_PER_ADDRESS
        wait = ratelimit.count_address_request(request, scope="dashboard", rate=rate)
        if wait is None:
            return None
        return throttled_page(rate, math.ceil(wait))


def throttled_page(rate: str, retry_after: int) -> HttpResponse:
    """The 429 page, rendered without the request: the header's account menu would read the
    session and the user, which is the work the limit is there to spare."""
    limit, period = ratelimit.parse_rate(rate)
    context = {"limit": limit, "period": _PERIOD_NAMES[period], "retry_after": retry_after}
    return HttpResponse(
        render_to_string("dashboard/throttled.html", context),
        status=429,
        headers={"Retry-After": str(retry_after)},
    )
