"""Project-level views: health, and envelope-aware 404/500 pages for the API."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views import defaults
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane import health
from controlplane.api.errors import error_response
from controlplane.api.schema import envelope
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


class HealthView(ApiView):
    """Public liveness/readiness: 200 while the database answers, 503 when it does not."""

    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(
        summary="Health of the control plane and its dependencies",
        responses={
            200: envelope(_health, name="HealthResponse"),
            503: envelope(_health, name="HealthDown"),
        },
    )
    def get(self, request: Request) -> Response:
        ready, body = health.report()
        return Response(body, status=200 if ready else 503)


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
