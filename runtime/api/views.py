"""Customer API for packages (with the tenant's availability), GPU units and operations, and
the generic endpoints of storages, reservations and secrets (controlplane/api/resources.py):
serializers validate, services act."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors as billing_selectors
from catalog import selectors as catalog_selectors
from catalog.models import Package
from catalog.serializers import PackageSerializer
from controlplane.api.pagination import (
    PageQuerySerializer,
    cursor_scope,
    decode_cursor,
    encode_cursor,
    paginate,
)
from controlplane.api.parsers import MergePatchParser, StrictJSONParser
from controlplane.api.renderers import EnvelopedResponse
from controlplane.api.resources import Endpoint, Words
from controlplane.api.resources import views as resource_views
from controlplane.api.schema import ErrorSerializer, envelope, error_responses
from controlplane.api.views import NotJsonBodyMixin, StrictQueryMixin
from controlplane.errors import NotFound
from controlplane.kube import logs as kube_logs
from controlplane.validation import fold_case
from runtime import (
    actions,
    availability,
    lifecycle,
    logs,
    orders,
    outbox,
    reservations,
    selectors,
    tenant_secrets,
    validation,
)
from runtime import storage as storage_service
from runtime.api.serializers import (
    ActionSerializer,
    CreateReservationSerializer,
    CreateSecretSerializer,
    CreateStorageSerializer,
    CreateUnitSerializer,
    OperationSerializer,
    RegionSerializer,
    ReservationSerializer,
    SecretSerializer,
    StorageSerializer,
    UnitEventSerializer,
    UnitListQuerySerializer,
    UnitLogQuerySerializer,
    UnitSerializer,
    UpdateUnitSerializer,
)
from runtime.models import (
    GPUStorage,
    GPUUnit,
    OperationKind,
    Reservation,
    ReservationStatus,
    TenantSecret,
)
from runtime.resources import RESERVATIONS, SECRETS, STORAGE
from tenancy.models import Tenant
from tenancy.permissions import IsTenant, tenant_of
from tenancy.views import TenantView

_UNIT = envelope(UnitSerializer, name="UnitResponse")
_ORDERED = envelope(
    UnitSerializer,
    name="UnitOrdered",
    meta=inline_serializer(
        name="OrderMeta",
        fields={
            "operationID": serializers.CharField(),
            "replayed": serializers.BooleanField(
                help_text="the unit an earlier request with this operationID made"
            ),
            "note": serializers.CharField(required=False),
        },
    ),
)
_OPERATION = envelope(OperationSerializer, name="OperationResponse")
# One UnitSerializer renders every single unit: building a ModelSerializer's fields costs more
# than rendering a unit with them, and to_representation keeps no per-call state.
_serialize_unit = UnitSerializer().to_representation


def with_costs(units: Iterable[GPUUnit]) -> list[GPUUnit]:
    """The units with their cost to date set, from the usage ledger in one query for all
    (and one more while any is running)."""
    units = list(units)
    costs = billing_selectors.cost_to_date([unit.uid for unit in units], now=timezone.now())
    for unit in units:
        unit.cost_to_date = costs[unit.uid]
    return units


def _render_unit(unit: GPUUnit) -> dict:
    if not hasattr(unit, "cost_to_date"):
        with_costs([unit])
    return _serialize_unit(unit)


_REPLAYED = "Idempotent-Replayed"


def _unit_or_404(tenant: Tenant, name: str) -> GPUUnit:
    name = fold_case(name.strip())
    # A name that could never exist is simply not found (and never reaches the database).
    unit = None if validation.unit_name(name) else selectors.get_unit(tenant=tenant, name=name)
    if unit is None:
        raise NotFound(f"gpu unit {name} not found.")
    return unit


@extend_schema_view(
    list=extend_schema(
        summary="Active packages with availability",
        responses={
            200: envelope(PackageSerializer, name="PackageList", many=True),
            **error_responses(401),
        },
    ),
    retrieve=extend_schema(
        summary="One active package",
        responses={
            200: envelope(PackageSerializer, name="PackageDetail"),
            **error_responses(401, 404),
        },
    ),
)
class PackageViewSet(StrictQueryMixin, viewsets.ReadOnlyModelViewSet):
    """What the tenant can order, and how many units of each fit now (the cluster's free
    devices from the inventory mirror, bounded by the tenant's quota)."""

    serializer_class = PackageSerializer
    permission_classes = [IsTenant]

    def get_queryset(self):
        return catalog_selectors.list_active_packages()

    def get_object(self) -> Package:
        package = catalog_selectors.get_active_package(self.kwargs["pk"])
        if package is None:
            raise NotFound(f'Package "{self.kwargs["pk"]}" does not exist or is not on sale.')
        return package

    def _render(self, packages: Iterable[Package], *, many: bool) -> Response:
        packages = list(packages)
        tenant = tenant_of(self.request)
        assert tenant is not None
        context = {"availability": availability.for_tenant(tenant, packages)}
        return Response(
            PackageSerializer(packages if many else packages[0], many=many, context=context).data
        )

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self._render(self.get_queryset(), many=True)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self._render([self.get_object()], many=False)


class UnitListView(TenantView):
    query_serializer = UnitListQuerySerializer
    query_methods = frozenset({"GET"})  # the list's filters and paging; an order is its body

    @extend_schema(
        summary="List the tenant's GPU units",
        parameters=[UnitListQuerySerializer],
        responses={
            200: envelope(UnitSerializer, name="UnitListResponse", many=True),
            **error_responses(400, 401),
        },
    )
    def get(self, request: Request) -> Response:
        params = self.validated_query(request)
        units = selectors.list_units(
            tenant=self.tenant,
            phase=params.get("phase"),
            package_id=params.get("packageID"),
            region=params.get("region"),
            include_terminated=params.get("include") == "terminated",
        )
        page, next_cursor = paginate(
            units,
            cursor=params.get("cursor"),
            limit=params["limit"],
            scope=cursor_scope(
                self.tenant.pk,
                params.get("phase"),
                fold_case(params.get("packageID") or ""),
                *([params["include"]] if params.get("include") else []),
                # Only when filtered, so cursors of unfiltered lists stay what they were.
                *([f"region={fold_case(params['region'])}"] if params.get("region") else []),
            ),
        )
        return EnvelopedResponse(
            {
                "data": UnitSerializer(with_costs(page), many=True).data,
                "meta": {"nextCursor": next_cursor},
            }
        )

    @extend_schema(
        summary="Order a GPU unit (idempotent on operationID)",
        description="meta.replayed is true when the answer is the unit an earlier request with "
        "the same operationID made (200, header Idempotent-Replayed); meta.note says when the "
        "name was written otherwise than sent (names are lower-case DNS labels).",
        request=CreateUnitSerializer,
        responses={
            201: _ORDERED,
            200: OpenApiResponse(_ORDERED, description="Replay of an earlier identical request"),
            **error_responses(400, 401, 409, 503),
        },
    )
    def post(self, request: Request) -> Response:
        serializer = CreateUnitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = orders.create_unit(
            tenant=self.tenant,
            operation_id=data["operationID"],
            name=data["name"],
            package_id=data["packageID"],
            image=data["image"],
            template=data.get("template"),
            access=data.get("access"),
            storage_mounts=data.get("storageMounts"),
            ssh=data.get("ssh"),
            stop_after=data.get("stopAfter"),
            region=data.get("region", ""),
            interruptible=data.get("interruptible", False),
            auto_resume=data.get("autoResume", False),
            reservation=data.get("reservation", ""),
        )
        unit = result.unit
        if result.created:
            unit.cost_to_date = Decimal(0)  # just ordered: nothing used yet
        meta = {"operationID": unit.operation_id, "replayed": not result.created}
        body = request.data  # a JSON object: the serializer took it
        sent = body.get("name") if isinstance(body, dict) else None
        if isinstance(sent, str) and sent != unit.name:
            meta["note"] = (
                f'The name "{sent}" is written "{unit.name}": names are lower-case DNS labels.'
            )
        headers = {"ETag": unit.etag}
        if result.created:
            location = reverse("v1:unit-detail", kwargs={"name": unit.name})
            headers["Location"] = location
        else:
            headers[_REPLAYED] = "true"
        return EnvelopedResponse(
            {"data": _render_unit(unit), "meta": meta},
            status=201 if result.created else 200,
            headers=headers,
        )


def _with_operation(
    unit: GPUUnit, operation_id: str, *, status: int, replayed: bool = False
) -> Response:
    return EnvelopedResponse(
        {"data": _render_unit(unit), "meta": {"operationID": operation_id}},
        status=status,
        headers={"ETag": unit.etag, **({_REPLAYED: "true"} if replayed else {})},
    )


_UNIT_WITH_OPERATION = envelope(
    UnitSerializer,
    name="UnitOperationResponse",
    meta=inline_serializer(name="OperationMeta", fields={"operationID": serializers.CharField()}),
)


class UnitDetailView(TenantView):
    # An update is a JSON merge patch (RFC 7396), sent as either type.
    parser_classes = [StrictJSONParser, MergePatchParser]

    @extend_schema(summary="One GPU unit", responses={200: _UNIT, **error_responses(401, 404)})
    def get(self, request: Request, name: str) -> Response:
        unit = _unit_or_404(self.tenant, name)
        return Response(_render_unit(unit), headers={"ETag": unit.etag})

    @extend_schema(
        summary="Update a GPU unit (JSON merge patch; If-Match: its etag)",
        description="Changes image, template, access, ssh, storageMounts or stopAfter: a field "
        "left out stays, null clears it. The pod is replaced when what it runs changes; the "
        "claim is kept. 202 with the unit at its new generation (meta.operationID names the "
        "update); 200 when nothing changed; 428 without If-Match, 412 when the unit changed "
        "since that etag; 400 immutable_field for the package and the other fixed fields.",
        request=UpdateUnitSerializer,
        parameters=[
            OpenApiParameter(
                "If-Match",
                str,
                OpenApiParameter.HEADER,
                required=True,
                description="the unit's etag as last read",
            )
        ],
        responses={
            202: _UNIT_WITH_OPERATION,
            200: OpenApiResponse(_UNIT_WITH_OPERATION, description="nothing changed, or a replay"),
            **error_responses(400, 401, 404, 409, 412, 428),
        },
    )
    def patch(self, request: Request, name: str) -> Response:
        serializer = UpdateUnitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        operation_id = serializer.validated_data["operationID"]
        result = actions.update_unit(
            tenant=self.tenant,
            name=name,  # the service answers 404 for a unit it does not find
            operation_id=operation_id,
            # As sent (nulls clear): the service merges, checks and hashes it.
            patch={
                key: request.data[key] for key in serializer.validated_data if key != "operationID"
            },
            if_match=request.headers.get("If-Match", "").strip(),
        )
        return _with_operation(
            result.unit,
            operation_id,
            status=202 if result.changed and not result.replayed else 200,
            replayed=result.replayed,
        )

    @extend_schema(
        summary="Delete a GPU unit (repeatable); meta.operationID names the deletion",
        responses={
            202: envelope(
                UnitSerializer,
                name="UnitDeletionResponse",
                meta=inline_serializer(
                    name="DeletionMeta",
                    fields={"operationID": serializers.CharField()},
                ),
            ),
            **error_responses(401, 404),
        },
    )
    def delete(self, request: Request, name: str) -> Response:
        unit = lifecycle.request_unit_deletion(
            tenant=self.tenant, name=_unit_or_404(self.tenant, name).name
        )
        # The unit's operationID is its order's: the deletion's own is named beside it.
        return EnvelopedResponse(
            {
                "data": _render_unit(unit),
                "meta": {"operationID": outbox.delete_operation_id(unit)},
            },
            status=202,
        )


class UnitActionView(TenantView):
    """POST /gpu-units/{name}/stop, /start, /restart: 202 with the operation."""

    kind = ""
    summary = ""

    def post(self, request: Request, name: str) -> Response:
        serializer = ActionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        name = fold_case(name.strip())
        if validation.unit_name(name):
            raise NotFound(f"gpu unit {name} not found.")
        result = actions.request_action(
            tenant=self.tenant,
            name=name,  # the action locks the unit, or answers 404
            kind=self.kind,
            operation_id=serializer.validated_data["operationID"],
        )
        headers = {"Location": f"/api/v1/operations/{result.operation.operation_id}"}
        if result.replayed:
            headers[_REPLAYED] = "true"
        return Response(
            OperationSerializer(result.operation).data,
            status=200 if result.replayed else 202,
            headers=headers,
        )


def _action_view(kind: str, summary: str, description: str) -> type[UnitActionView]:
    view = type(
        f"Unit{kind.capitalize()}View", (UnitActionView,), {"kind": kind, "summary": summary}
    )
    return extend_schema_view(
        post=extend_schema(
            summary=summary,
            description=description,
            request=ActionSerializer,
            responses={
                202: _OPERATION,
                200: OpenApiResponse(_OPERATION, description="Replay of an earlier request"),
                **error_responses(400, 401, 404, 409),
            },
        )
    )(view)


UnitStopView = _action_view(
    OperationKind.STOP,
    "Stop a GPU unit (its devices go back to the pool; name, storage, access stay)",
    "The pod is deleted and the claim's devices are released; the unit goes Stopping, then "
    "Stopped, and its CPU and memory no longer count against the quota. 409 invalid_state "
    "from Stopping, Stopped, Preempted, Terminating, Terminated; 409 operation_in_progress "
    "while another "
    "operation on the unit is open.",
)
UnitStartView = _action_view(
    OperationKind.START,
    "Start a stopped or preempted GPU unit (devices are allocated afresh)",
    "The pod is created again; the unit is Pending with a reason while no devices fit "
    "(GET /packages says beforehand whether its package is placeable). 409 quota_exceeded when "
    "its CPU or memory no longer fit the quota; 409 invalid_state unless Stopped or Preempted.",
)
UnitRestartView = _action_view(
    OperationKind.RESTART,
    "Restart a GPU unit (a new pod; healthy devices)",
    "The pod is replaced by a new one; the claim is kept and its devices allocated afresh, so "
    "a unit that failed on an unhealthy device lands on healthy ones. 409 invalid_state from "
    "Stopping, Stopped, Preempted, Terminating, Terminated.",
)


class UnitEventsView(TenantView):
    query_serializer = PageQuerySerializer

    @extend_schema(
        summary="The unit's timeline, oldest first, a page at a time (meta.nextCursor)",
        parameters=[PageQuerySerializer],
        responses={
            200: envelope(UnitEventSerializer, name="UnitEventList", many=True),
            **error_responses(400, 401, 404),
        },
    )
    def get(self, request: Request, name: str) -> Response:
        params = self.validated_query(request)
        unit = _unit_or_404(self.tenant, name)
        # The cursor counts the entries already read (a unit's timeline is short, and a
        # count names no row id the tenant could compare with other tenants' activity).
        scope = cursor_scope(self.tenant.pk, unit.uid, "events")
        start = int(decode_cursor(params["cursor"], scope)) if params.get("cursor") else 0
        limit = params["limit"]
        rows = list(selectors.list_unit_events(unit=unit)[start : start + limit + 1])
        more = len(rows) > limit
        return EnvelopedResponse(
            {
                "data": UnitEventSerializer(rows[:limit], many=True).data,
                "meta": {"nextCursor": encode_cursor(str(start + limit), scope) if more else None},
            }
        )


class UnitLogsView(NotJsonBodyMixin, TenantView):
    """The unit pod's log as text/plain (errors stay JSON in the envelope)."""

    query_serializer = UnitLogQuerySerializer

    @extend_schema(
        summary="The unit's log (text/plain; follow=true streams new lines)",
        parameters=[
            UnitLogQuerySerializer,
            OpenApiParameter(
                "Retry-After",
                int,
                OpenApiParameter.HEADER,
                response=[429],
                description="seconds after which a follower's slot frees at the latest",
            ),
        ],
        responses={
            (200, "text/plain"): OpenApiResponse(description="the log"),
            **error_responses(400, 401, 404, 409),
            429: OpenApiResponse(
                ErrorSerializer,
                description=(
                    "`throttled`: with follow=true, the tenant's, everyone's or this server's "
                    "followed logs are all open (LOGS_FOLLOWERS_*; details.limit says which); "
                    "or too many requests for this API key"
                ),
            ),
        },
    )
    def get(self, request: Request, name: str) -> HttpResponse | StreamingHttpResponse:
        params = self.validated_query(request)
        unit = _unit_or_404(self.tenant, name)
        options = kube_logs.LogOptions(
            container=params.get("container", ""),
            tail_lines=params.get("tailLines"),
            since_seconds=params.get("sinceSeconds"),
            timestamps=params["timestamps"],
            limit_bytes=None if params["follow"] else settings.LOGS_MAX_BYTES,
        )
        if params["follow"]:
            return StreamingHttpResponse(
                logs.follow(unit, options), content_type="text/plain; charset=utf-8"
            )
        return HttpResponse(logs.read(unit, options), content_type="text/plain; charset=utf-8")


class OperationDetailView(TenantView):
    @extend_schema(
        summary="Status of an operation (create, delete, stop, start, restart, update)",
        responses={
            200: _OPERATION,
            **error_responses(401, 404),
        },
    )
    def get(self, request: Request, operation_id: str) -> Response:
        operation = (
            selectors.get_operation(tenant=self.tenant, operation_id=operation_id)
            if validation.operation_lookup_id(operation_id)
            else None
        )
        if operation is None:
            raise NotFound(f"operation {operation_id} not found.")
        return Response(OperationSerializer(operation).data)


class RegionListView(TenantView):
    """Where units can run: each region, its clusters' health, and what fits there now."""

    @extend_schema(
        summary="List the regions, their clusters' health and what fits in each now",
        responses={200: envelope(RegionSerializer, name="RegionListResponse", many=True)},
    )
    def get(self, request: Request) -> Response:
        packages = catalog_selectors.list_active_packages()
        return Response(availability.regions_for(self.tenant, packages))


def _mounts_of(tenant: Tenant, page: list[GPUStorage]) -> dict[str, dict[str, list[str]]]:
    """Storage name -> the live units mounting it, in one query for a whole page."""
    mounted: dict[str, list[str]] = {}
    for name, mounts in selectors.live_units_with_mounts(tenant=tenant):
        for mount in mounts:
            mounted.setdefault(mount["name"], []).append(name)
    return {"mounted_by": mounted}


StorageListView, StorageDetailView = resource_views(
    Endpoint(
        resource=STORAGE,
        schema="Storage",
        output=StorageSerializer,
        input=CreateStorageSerializer,
        rows=lambda tenant: GPUStorage.objects.filter(tenant=tenant),
        one=lambda tenant, name: storage_service.get_storage(tenant=tenant, name=name),
        context=_mounts_of,
        fresh=lambda storage: {"mounted_by": {}},
        deleted=202,
        words=Words(
            list="The tenant's storages by name, a page at a time",
            create="Create a storage (a PersistentVolumeClaim the tenant's units can mount)",
            one="One storage",
            delete="Delete a storage (409 storage_in_use while a live unit mounts it)",
        ),
    ),
    base=TenantView,
)


def _nothing_held(made: Reservation) -> dict[str, Any]:
    """Just made, or cancelled before its start: nothing is held or in use."""
    usage = reservations.Usage(
        count=made.count, held=0, in_use=0, open=made.status != ReservationStatus.CANCELLED
    )
    return {"usage": {made.pk: usage}}


ReservationListView, ReservationDetailView = resource_views(
    Endpoint(
        resource=RESERVATIONS,
        schema="Reservation",
        output=ReservationSerializer,
        input=CreateReservationSerializer,
        rows=lambda tenant: Reservation.objects.filter(tenant=tenant).select_related("package"),
        one=lambda tenant, name: reservations.get_reservation(tenant=tenant, name=name),
        context=lambda tenant, page: {"usage": reservations.usage(page)},
        fresh=_nothing_held,
        deleted=200,
        create_errors=(400, 401, 409, 503),
        words=Words(
            list="The tenant's reservations by name, with what each holds now, a page at a time",
            create="Reserve devices: count units' worth of a package from start to end",
            one="One reservation",
            delete="Cancel a reservation before its start (409 invalid_state once it started)",
        ),
    ),
    base=TenantView,
)

SecretListView, SecretDetailView = resource_views(
    Endpoint(
        resource=SECRETS,
        schema="Secret",
        output=SecretSerializer,
        input=CreateSecretSerializer,
        rows=lambda tenant: TenantSecret.objects.filter(tenant=tenant),
        one=lambda tenant, name: tenant_secrets.get_secret(tenant=tenant, name=name),
        create_errors=(400, 401, 409, 503),
        delete_errors=(401, 404, 409, 503),
        words=Words(
            list="The tenant's secrets (names and keys, never values), a page at a time",
            create="Create or replace a secret (a Kubernetes Secret in the tenant's namespace)",
            create_details="Units read a key with template.env[] = {name, secretRef: {name, "
            "key}}. Sending a name again replaces all its keys and values (200; 201 when new), "
            "so a retry is safe; running units see a new value from their next start or "
            "restart. Values are never returned. 409 limit_exceeded past the tenant's secret "
            "limit (GET /quota), 409 secret_conflict when a Secret of that name exists that the "
            "control plane does not manage, 503 while the tenant's namespace is being prepared.",
            one="One secret (its keys, never its values)",
            delete="Delete a secret (409 secret_in_use while a live unit reads it)",
        ),
    ),
    base=TenantView,
)
