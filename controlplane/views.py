"""Project-level views: health, readiness, and envelope-aware 404/500 pages for the API."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views import defaults
from django.views.decorators.http import require_safe
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from controlplane import health, ratelimit
from controlplane.api.errors import error_response
from controlplane.api.schema import ErrorSerializer, envelope
from controlplane.api.views import ApiView

_check = inline_serializer(
    name="HealthCheck",
    fields={
        "ok": serializers.BooleanField(),
        "latencyMs": serializers.FloatField(required=False),
        "error": serializers.CharField(required=False),
        "lastHeartbeat": serializers.DateTimeField(required=False, allow_null=True),
        "lastSync": serializers.DateTimeField(required=False, allow_null=True),
        "leader": serializers.CharField(required=False, allow_null=True),
        "lastEvent": serializers.DateTimeField(required=False, allow_null=True),
        "lagSeconds": serializers.FloatField(required=False, allow_null=True),
    },
)
_health = inline_serializer(
    name="Health",
    fields={
        "status": serializers.ChoiceField(choices=["ok", "degraded", "down"]),
        "checks": serializers.DictField(child=_check),
    },
)


class HealthRateThrottle(BaseThrottle):
    """HEALTH_RATE_PER_ADDRESS reports per client address: each one makes a cluster call."""

    def allow_request(self, request: Request, view: APIView) -> bool:
        self._wait = ratelimit.count_address_request(
            request, scope="health", rate=settings.HEALTH_RATE_PER_ADDRESS
        )
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait


class HealthView(ApiView):
    """Public health: 200 while the database answers, 503 when it does not (as /readyz)."""

    authentication_classes: list = []
    permission_classes: list = []
    throttle_classes = [HealthRateThrottle]

    @extend_schema(
        summary="Health of the control plane and its dependencies",
        description=(
            "Limited to HEALTH_RATE_PER_ADDRESS requests per client address, since each "
            "report asks the cluster; probes that only need readiness use /readyz."
        ),
        responses={
            200: envelope(_health, name="HealthResponse"),
            429: OpenApiResponse(
                ErrorSerializer,
                description="`throttled`: too many requests from this client address "
                "(see Retry-After)",
            ),
            503: envelope(_health, name="HealthDown"),
        },
    )
    def get(self, request: Request) -> Response:
        ready, body = health.report()
        return Response(body, status=200 if ready else 503)


@require_safe
def readiness(request: HttpRequest) -> HttpResponse:
    """Kubernetes' readiness probe: ready while the database answers, the one dependency
    readiness rests on (health.report). One `SELECT 1`, no cluster call, so it is never
    rate-limited: the kubelet probes every pod of a node from that node's address, and a 429
    would take them all out of service together."""
    if health.check_database().ok:
        return HttpResponse("ok\n", content_type="text/plain")
    return HttpResponse("database unavailable\n", status=503, content_type="text/plain")


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _is_api(request):
        return error_response(404, "not_found", f"No API route matches {request.path}.")
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return error_response(500, "internal_error", "The server failed to handle this request.")
    return defaults.server_error(request)
