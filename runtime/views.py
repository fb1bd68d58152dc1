"""Customer API for GPU units and operations: serializers validate, services act."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.api.errors import InvalidRequest, NotFound
from controlplane.api.pagination import paginate, parse_limit
from controlplane.api.permissions import IsTenant
from controlplane.api.schema import envelope, error_responses
from runtime import selectors, services
from runtime.models import UnitPhase
from runtime.serializers import (
    CreateUnitSerializer,
    OperationSerializer,
    UnitEventSerializer,
    UnitSerializer,
)

_UNIT = envelope(UnitSerializer, name="UnitResponse")
_REPLAYED = "Idempotent-Replayed"


class TenantView(APIView):
    permission_classes = [IsTenant]

    @property
    def tenant(self):
        return self.request.user.tenant


def _unit_or_404(tenant, name: str):
    unit = selectors.get_unit(tenant=tenant, name=name)
    if unit is None:
        raise NotFound(f"gpu unit {name} not found.")
    return unit


class UnitListView(TenantView):
    @extend_schema(
        summary="List the tenant's GPU units",
        operation_id="gpu_units_list",
        parameters=[
            OpenApiParameter("phase", enum=list(UnitPhase.values)),
            OpenApiParameter("packageID", str),
            OpenApiParameter("cursor", str, description="meta.nextCursor of the previous page"),
            OpenApiParameter("limit", int, description="1-100, default 20"),
        ],
        responses={
            200: envelope(UnitSerializer, name="UnitListResponse", many=True),
            **error_responses(400, 401),
        },
    )
    def get(self, request: Request) -> Response:
        phase = request.query_params.get("phase")
        if phase and phase not in UnitPhase.values:
            raise InvalidRequest(
                f"phase must be one of {', '.join(UnitPhase.values)}.",
                details={"fields": {"phase": ["Unknown phase."]}},
            )
        units = selectors.list_units(
            tenant=self.tenant, phase=phase, package_id=request.query_params.get("packageID")
        )
        page, next_cursor = paginate(
            units,
            cursor=request.query_params.get("cursor"),
            limit=parse_limit(request.query_params.get("limit")),
        )
        response = Response(
            {"data": UnitSerializer(page, many=True).data, "meta": {"nextCursor": next_cursor}}
        )
        response.enveloped = True
        return response

    @extend_schema(
        summary="Order a GPU unit (idempotent on operationID)",
        operation_id="gpu_units_create",
        request=CreateUnitSerializer,
        responses={
            201: _UNIT,
            200: OpenApiResponse(_UNIT, description="Replay of an earlier identical request"),
            **error_responses(400, 401, 409, 503),
        },
    )
    def post(self, request: Request) -> Response:
        serializer = CreateUnitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = services.create_unit(
            tenant=self.tenant,
            operation_id=data["operationID"],
            name=data["name"],
            package_id=data["packageID"],
            image=data["image"],
            template=data.get("template"),
        )
        body = UnitSerializer(result.unit).data
        if result.created:
            return Response(body, status=201)
        return Response(body, status=200, headers={_REPLAYED: "true"})


class UnitDetailView(TenantView):
    @extend_schema(summary="One GPU unit", responses={200: _UNIT, **error_responses(401, 404)})
    def get(self, request: Request, name: str) -> Response:
        return Response(UnitSerializer(_unit_or_404(self.tenant, name)).data)

    @extend_schema(
        summary="Delete a GPU unit (repeatable)",
        responses={202: _UNIT, **error_responses(401, 404)},
    )
    def delete(self, request: Request, name: str) -> Response:
        unit = services.request_unit_deletion(tenant=self.tenant, name=name.strip().lower())
        return Response(UnitSerializer(unit).data, status=202)


class UnitEventsView(TenantView):
    @extend_schema(
        summary="The unit's timeline",
        responses={
            200: envelope(UnitEventSerializer, name="UnitEventList", many=True),
            **error_responses(401, 404),
        },
    )
    def get(self, request: Request, name: str) -> Response:
        unit = _unit_or_404(self.tenant, name)
        return Response(UnitEventSerializer(selectors.list_unit_events(unit=unit), many=True).data)


class OperationDetailView(TenantView):
    @extend_schema(
        summary="Status of a create or delete operation",
        responses={
            200: envelope(OperationSerializer, name="OperationResponse"),
            **error_responses(401, 404),
        },
    )
    def get(self, request: Request, operation_id: str) -> Response:
        operation = selectors.get_operation(tenant=self.tenant, operation_id=operation_id)
        if operation is None:
            raise NotFound(f"operation {operation_id} not found.")
        return Response(OperationSerializer(operation).data)
