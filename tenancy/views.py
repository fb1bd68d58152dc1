"""The tenant's SSH keys (register once, used by every unit with SSH enabled) and webhooks,
on the generic endpoints (controlplane/api/resources.py) with a webhook's own actions, and the
audit log: a tenant's own writes, and every tenant's for operator keys."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.api.pagination import (
    cursor_scope,
    page_body,
    paginate,
)
from controlplane.api.parsers import MergePatchParser, StrictJSONParser
from controlplane.api.renderers import EnvelopedResponse
from controlplane.api.resources import Endpoint, Words
from controlplane.api.resources import views as resource_views
from controlplane.api.schema import envelope, error_responses
from controlplane.api.views import ApiView, NotJsonBodyMixin
from controlplane.errors import NotFound
from controlplane.validation import fold_case
from tenancy import selectors, webhooks
from tenancy.models import (
    AuditActorKind,
    AuditEvent,
    SSHKey,
    Tenant,
    WebhookDelivery,
    WebhookEndpoint,
)
from tenancy.permissions import IsOperator, IsTenant, tenant_of
from tenancy.resources import SSH_KEYS, WEBHOOKS
from tenancy.serializers import (
    AuditEventQuerySerializer,
    AuditEventSerializer,
    CreateSSHKeySerializer,
    CreateWebhookSerializer,
    OperatorAuditEventQuerySerializer,
    SSHKeySerializer,
    TenantAuditEventSerializer,
    UpdateWebhookSerializer,
    WebhookDeliveryQuerySerializer,
    WebhookDeliverySerializer,
    WebhookSerializer,
    WebhookWithSecretSerializer,
    audit_cloudevent,
)


class TenantView(ApiView):
    """An API view acting for the tenant behind the request's key (the runtime's views too)."""

    permission_classes = [IsTenant]

    @property
    def tenant(self) -> Tenant:
        tenant = tenant_of(self.request)
        assert tenant is not None
        return tenant


def _ssh_key(tenant: Tenant, name: str) -> SSHKey:
    key = SSHKey.objects.filter(tenant=tenant, name=fold_case(name.strip())).first()
    if key is None:
        raise NotFound(f"SSH key {name} not found.")
    return key


SSHKeyListView, SSHKeyDetailView = resource_views(
    Endpoint(
        resource=SSH_KEYS,
        schema="SSHKey",
        output=SSHKeySerializer,
        input=CreateSSHKeySerializer,
        rows=lambda tenant: SSHKey.objects.filter(tenant=tenant),
        one=_ssh_key,
        delete_errors=(401, 404),
        words=Words(
            list="The tenant's SSH public keys, by name, a page at a time (meta.nextCursor)",
            create="Register an SSH public key",
            one="One SSH key",
            delete="Remove an SSH key (units using it lose it)",
        ),
    ),
    base=TenantView,
)


_AUDIT_FILTERS = ("action", "target", "actor", "source", "outcome", "requestId", "from", "to")
_AUDIT_RESPONSES: dict[Any, Any] = {
    (200, "application/x-ndjson"): OpenApiResponse(
        response=OpenApiTypes.STR,
        description="format=cloudevents: one CloudEvent (type io.lokiwager.gpu.audit) per line",
    ),
}


def audit_page(
    request: Request,
    events: QuerySet[AuditEvent],
    params: dict[str, Any],
    *,
    scope: str,
    for_tenant: bool = False,
) -> Response | HttpResponse:
    """A page of `events`, newest first: JSON with `meta.nextCursor`, or (format=cloudevents)
    NDJSON with the next page's address in a Link header. `for_tenant`: the tenant's own
    log, where staff are "operator" (one query for which of the page's users are staff)."""
    page, next_cursor = paginate(
        events, cursor=params.get("cursor"), limit=params["limit"], scope=scope
    )
    serializer: type[AuditEventSerializer] = AuditEventSerializer
    context: dict[str, Any] = {}
    if for_tenant:
        serializer = TenantAuditEventSerializer
        context["operators"] = selectors.staff_usernames(
            {e.actor for e in page if e.actor_kind == AuditActorKind.USER}
        )
    if params["format"] != "cloudevents":
        return EnvelopedResponse(
            {
                "data": serializer(page, many=True, context=context).data,
                "meta": {"nextCursor": next_cursor},
            }
        )
    source = f"//{request.get_host()}/audit"
    response = HttpResponse(
        "".join(
            json.dumps(
                audit_cloudevent(event, source=source, serializer=serializer, context=context),
                separators=(",", ":"),
            )
            + "\n"
            for event in page
        ),
        content_type="application/x-ndjson",
    )
    if next_cursor is not None:
        query = urlencode({**request.query_params.dict(), "cursor": next_cursor})
        response["Link"] = f'<{request.build_absolute_uri(request.path)}?{query}>; rel="next"'
    return response


def audit_filter(params: dict[str, Any], **scope: Any) -> selectors.AuditFilter:
    return selectors.AuditFilter(
        action=params.get("action", ""),
        target_kind=params["target_kind"],
        target_name=params["target_name"],
        actor=params.get("actor", ""),
        source=params.get("source", ""),
        outcome=params.get("outcome", ""),
        request_id=params.get("requestId", ""),
        start=params.get("from"),
        end=params.get("to"),
        **scope,
    )


def audit_scope(params: dict[str, Any], *owner: object) -> str:
    """A cursor is good for the list it came from: this reader, these filters."""
    return cursor_scope(*owner, "audit", *(params.get(name) for name in _AUDIT_FILTERS))


class AuditEventListView(NotJsonBodyMixin, TenantView):
    """The tenant's audit log: every write its keys made, and every write its dashboard users
    and ops made for it (the admin's included)."""

    query_serializer = AuditEventQuerySerializer

    @extend_schema(
        summary="The tenant's audit log, newest first, a page at a time (meta.nextCursor)",
        parameters=[AuditEventQuerySerializer],
        responses={
            200: envelope(AuditEventSerializer, name="AuditEventList", many=True),
            **_AUDIT_RESPONSES,
            **error_responses(400, 401),
        },
    )
    def get(self, request: Request) -> Response | HttpResponse:
        params = self.validated_query(request)
        events = selectors.list_audit_events(
            audit_filter(params, tenant=self.tenant, staff_as_operator=True)
        )
        return audit_page(
            request, events, params, scope=audit_scope(params, self.tenant.pk), for_tenant=True
        )


class OperatorAuditEventListView(NotJsonBodyMixin, ApiView):
    """Every tenant's audit log, and the writes that were for no tenant (the catalog, the
    clusters in the admin): operator keys only."""

    permission_classes = [IsOperator]
    query_serializer = OperatorAuditEventQuerySerializer

    @extend_schema(
        summary="The audit log of every tenant (operator keys only)",
        parameters=[OperatorAuditEventQuerySerializer],
        responses={
            200: envelope(AuditEventSerializer, name="OperatorAuditEventList", many=True),
            **_AUDIT_RESPONSES,
            **error_responses(400, 401, 403),
        },
    )
    def get(self, request: Request) -> Response | HttpResponse:
        params = self.validated_query(request)
        tenant = params.get("tenant", "")
        events = selectors.list_audit_events(audit_filter(params, tenant_slug=tenant))
        return audit_page(request, events, params, scope=audit_scope(params, "operator", tenant))


def _webhook_scope(tenant: Tenant, *parts: object) -> str:
    return cursor_scope(tenant.pk, "webhooks", *parts)


WebhookListView, _WebhookDetail = resource_views(
    Endpoint(
        resource=WEBHOOKS,
        schema="Webhook",
        output=WebhookSerializer,
        made_output=WebhookWithSecretSerializer,
        input=CreateWebhookSerializer,
        rows=lambda tenant: WebhookEndpoint.objects.filter(tenant=tenant),
        one=webhooks.endpoint_of,
        order="id",
        key="id",
        delete_errors=(401, 404),
        words=Words(
            list="The tenant's webhooks, oldest first, a page at a time (meta.nextCursor)",
            create="Add a webhook: its signing secret is in this answer only",
            one="One webhook",
            delete="Remove a webhook and its delivery log (nothing more is sent to it)",
        ),
    ),
    base=TenantView,
)


class WebhookDetailView(_WebhookDetail):  # type: ignore[valid-type,misc]
    parser_classes = [StrictJSONParser, MergePatchParser]

    @extend_schema(
        summary="Change a webhook's URL, events or description, or turn it off (enabled: false)",
        request=UpdateWebhookSerializer,
        responses={
            200: envelope(WebhookSerializer, name="WebhookUpdated"),
            **error_responses(400, 401, 404),
        },
    )
    def patch(self, request: Request, id: str) -> Response:
        endpoint = webhooks.endpoint_of(self.tenant, id)
        serializer = UpdateWebhookSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        endpoint = webhooks.update_endpoint(endpoint, serializer.validated_data)
        return Response(WebhookSerializer(endpoint).data)


class WebhookRotateSecretView(TenantView):
    @extend_schema(
        summary="A new signing secret (in this answer only); the previous one keeps signing "
        "beside it until previousSecretValidUntil",
        request=None,
        responses={
            200: envelope(WebhookWithSecretSerializer, name="WebhookRotated"),
            **error_responses(401, 404),
        },
    )
    def post(self, request: Request, id: str) -> Response:
        endpoint = webhooks.rotate_secret(webhooks.endpoint_of(self.tenant, id))
        return Response(WebhookWithSecretSerializer(endpoint).data)


class WebhookTestView(TenantView):
    @extend_schema(
        summary="Send a webhook.test event to this webhook now (see its deliveries)",
        request=None,
        responses={
            202: envelope(WebhookDeliverySerializer, name="WebhookTestDelivery"),
            **error_responses(401, 404),
        },
    )
    def post(self, request: Request, id: str) -> Response:
        delivery = webhooks.send_test(webhooks.endpoint_of(self.tenant, id))
        return Response(WebhookDeliverySerializer(delivery).data, status=202)


class WebhookDeliveryListView(TenantView):
    query_serializer = WebhookDeliveryQuerySerializer

    @extend_schema(
        summary="A webhook's deliveries, newest first, each with its attempts",
        parameters=[WebhookDeliveryQuerySerializer],
        responses={
            200: envelope(WebhookDeliverySerializer, name="WebhookDeliveryList", many=True),
            **error_responses(400, 401, 404),
        },
    )
    def get(self, request: Request, id: str) -> Response:
        params = self.validated_query(request)
        endpoint = webhooks.endpoint_of(self.tenant, id)
        deliveries = WebhookDelivery.objects.filter(endpoint=endpoint).prefetch_related(
            "attempt_log"
        )
        if status := params.get("status"):
            deliveries = deliveries.filter(status=status)
        if event_type := params.get("eventType"):
            deliveries = deliveries.filter(event_type=event_type)
        return EnvelopedResponse(
            page_body(
                deliveries,
                params,
                scope=_webhook_scope(self.tenant, endpoint.pk, status, event_type),
                serializer=WebhookDeliverySerializer,
            )
        )
