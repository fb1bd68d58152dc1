"""The audit log's writing side: every write (POST, PUT, PATCH, DELETE) through the API, the
dashboard and the admin by a known actor (an API key, a signed-in user) becomes one
AuditEvent, recorded by AuditMiddleware once the answer is known: one INSERT per write, and
nothing read for it that the request has not read already. No body is ever recorded.

What a write is called comes from one table per surface: the API's operationIds
(controlplane.api.schema.OPERATIONS), the dashboard's routes (registered by the dashboard with
`register_actions`, in the same words where it does what an API operation does), and the
admin's `<app>.<model>.<verb>`. Views add what only they know with `note`: the tenant a staff
user acted for, the name of what a form created, an answer that succeeded without the
redirect a form page answers with."""

from __future__ import annotations

import ipaddress
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.contrib.admin.utils import unquote
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from controlplane import metrics
from controlplane.api.schema import OPERATIONS
from controlplane.ratelimit import client_address
from controlplane.request_id import request_id
from tenancy.models import (
    ApiKey,
    AuditActorKind,
    AuditEvent,
    AuditOutcome,
    AuditSource,
    Tenant,
)

logger = logging.getLogger(__name__)

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Answers given before anything was done: not authenticated, not allowed, throttled.
REFUSED_BEFORE_ACTING = frozenset({401, 403, 429})
# What names the object of a write in a route's address, in the order looked for.
_TARGET_ARGUMENTS = ("name", "id", "operation_id", "pk", "uid")
_ADMIN_ACTION = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_ERROR_BODY_BYTES = 64 * 1024

# "<namespace>:<route name>" -> action, for the routes outside the API (the dashboard's).
_ACTIONS: dict[str, str] = {}


def register_actions(namespace: str, actions: Mapping[str, str]) -> None:
    """Name the writes of `namespace`'s routes (route name -> action); a route left out is
    recorded as `<namespace>.<route name>`."""
    _ACTIONS.update({f"{namespace}:{route}": action for route, action in actions.items()})


def resource_of(action: str) -> str:
    """The resource an action is about: `units_stop` -> `units`; "" for a bare verb."""
    resource, _, _ = action.rpartition("_")
    return resource


@dataclass
class AuditNote:
    """What a view said about its write, beyond what the route and the answer say."""

    tenant_id: int | None = None
    tenant_slug: str = ""
    target_name: str = ""
    succeeded: bool | None = None


def _note_of(request: HttpRequest) -> AuditNote:
    found = getattr(request, "_audit_note", None)
    if found is None:
        found = AuditNote()
        request._audit_note = found  # type: ignore[attr-defined]
    return found


def note(
    request: HttpRequest,
    *,
    tenant: Tenant | None = None,
    target_name: str = "",
    succeeded: bool | None = None,
) -> None:
    """Tell the audit log what this request's write acted for and on: the tenant (a staff
    user's choice, a unit's owner), the name of the thing (one a form just created), and
    whether it succeeded when the answer does not say so by itself (a page shown instead of
    a redirect). What is not given stays as it was."""
    current = _note_of(request)
    if tenant is not None:
        current.tenant_id, current.tenant_slug = tenant.pk, tenant.slug
    if target_name:
        current.target_name = target_name
    if succeeded is not None:
        current.succeeded = succeeded


@dataclass(frozen=True)
class Written:
    """One write as the route and its answer describe it, before it is stored."""

    source: str
    action: str
    target_kind: str
    target_name: str
    actor_kind: str
    actor: str
    error_code: str = ""


class AuditMiddleware:
    """Records each write by a known actor once it has been answered, whatever the answer
    (a refusal is recorded as a failure, with its status and error code), but a refusal
    before anything was done (401, 403, 429), which is counted in
    `controlplane_audit_refused_total` instead. Writes to a route
    that does not take the method (405) and requests without an actor (no key, a failed
    login: django-axes records those) are not writes of anyone's and are left out. Placed
    after the session, authentication and message middleware, so it sees the user and the
    messages a page queued."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.method not in WRITE_METHODS:
            return self.get_response(request)
        # A logout replaces request.user: the one before is kept (still unread, so free).
        user_before = getattr(request, "user", None)
        response = self.get_response(request)
        try:
            record(request, response, user_before=user_before)
        except Exception:  # the write happened: its answer stands, the loss is logged
            logger.exception(
                "audit event of %s %s (request %s) not recorded",
                request.method,
                request.path,
                request_id(request),
            )
        return response

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> None:
        model_admin = getattr(view_func, "model_admin", None)
        if request.method in WRITE_METHODS and isinstance(model_admin, ModelAdmin):
            # Before the view: a deleted object no longer says whose it was.
            _note_admin_tenant(request, model_admin, view_kwargs)


def record(
    request: HttpRequest, response: HttpResponseBase, *, user_before: Any = None
) -> AuditEvent | None:
    """Store the audit event of the write `request` answered with `response` (None when it
    is not one: see AuditMiddleware)."""
    match = request.resolver_match
    if match is None or response.status_code == 405:
        return None
    if request.path.startswith("/api/"):
        written = _api_write(request, response)
    elif "admin" in match.namespaces:
        written = _admin_write(request, user_before)
    elif "dashboard" in match.namespaces:
        written = _dashboard_write(request, user_before)
    else:
        return None
    if written is None:
        return None
    status = response.status_code
    if status in REFUSED_BEFORE_ACTING:
        # Nothing was done: a flood of them (a throttled key, a wrong one) is a count, not
        # rows that would bury the log's writes.
        metrics.AUDIT_REFUSED.labels(source=written.source, status=str(status)).inc()
        return None
    noted = _note_of(request)
    if noted.succeeded is not None:
        succeeded = noted.succeeded
    elif status >= 400:
        succeeded = False
    elif written.source == AuditSource.API:
        succeeded = True
    else:
        # A form page (dashboard, admin) redirects once it did what was asked (post, redirect,
        # get): one answered with a page is the form again, with its errors or a confirmation
        # step; a refusal it redirects with is said in a warning or an error message.
        succeeded = 300 <= status < 400 and not _warned(request)
    return AuditEvent.objects.create(
        source=written.source,
        actor_kind=written.actor_kind,
        actor=written.actor[:150],
        tenant_id=noted.tenant_id,
        tenant_slug=noted.tenant_slug,
        action=written.action[:100],
        target_kind=written.target_kind[:100],
        target_name=(noted.target_name or written.target_name)[:255],
        method=str(request.method),
        path=request.path[:500],
        status=status,
        outcome=AuditOutcome.SUCCESS if succeeded else AuditOutcome.FAILURE,
        error_code=written.error_code[:64],
        request_id=request_id(request),
        remote_address=_address(request),
    )


def _api_write(request: HttpRequest, response: HttpResponseBase) -> Written | None:
    """A write through the API: by the key DRF authenticated (never the session), named by
    the operation's id."""
    match = request.resolver_match
    assert match is not None
    api_key = getattr(request, "auth", None)
    if not isinstance(api_key, ApiKey):
        return None
    path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", match.route)
    operation = OPERATIONS.get((str(request.method), path))
    if operation is None:
        return None
    note(request, tenant=api_key.tenant)
    data = getattr(response, "data", None)
    name = _target_argument(match.kwargs)
    if not name and response.status_code < 400 and isinstance(data, dict):
        # A create names its new resource in the answer.
        name = str(data.get("name") or data.get("id") or "")
    return Written(
        source=AuditSource.API,
        action=operation[0],
        target_kind=resource_of(operation[0]),
        target_name=name,
        actor_kind=AuditActorKind.API_KEY,
        actor=api_key.prefix,
        error_code=_error_code(response) if response.status_code >= 400 else "",
    )


def _dashboard_write(request: HttpRequest, user_before: Any) -> Written | None:
    match = request.resolver_match
    assert match is not None
    user = _signed_in(request, user_before)
    if user is None:
        return None
    action = _ACTIONS.get(match.view_name, match.view_name.replace(":", "."))
    return Written(
        source=AuditSource.DASHBOARD,
        action=action,
        target_kind=resource_of(action),
        target_name=_target_argument(match.kwargs),
        actor_kind=AuditActorKind.USER,
        actor=user.get_username(),
    )


def _admin_write(request: HttpRequest, user_before: Any) -> Written | None:
    match = request.resolver_match
    assert match is not None
    user = _signed_in(request, user_before)
    if user is None:
        return None
    model_admin = getattr(match.func, "model_admin", None)
    if not isinstance(model_admin, ModelAdmin):
        # The site's own pages: login, logout, password_change.
        return Written(
            source=AuditSource.ADMIN,
            action=match.url_name or "",
            target_kind="",
            target_name="",
            actor_kind=AuditActorKind.USER,
            actor=user.get_username(),
        )
    opts = model_admin.model._meta
    model = f"{opts.app_label}.{opts.model_name}"
    verb = (match.url_name or "").removeprefix(f"{opts.app_label}_{opts.model_name}_")
    name = unquote(str(match.kwargs.get("object_id", "")))
    if verb == "changelist":
        chosen = _chosen_admin_action(request)
        if chosen == "delete_selected" and "post" not in request.POST:
            return None  # the confirmation page of a bulk deletion: nothing written yet
        # A bulk action is named as the admin names it; saving the list's editable columns
        # is a change.
        verb = chosen or "change"
        name = _selection(request)
    return Written(
        source=AuditSource.ADMIN,
        action=f"{model}.{verb}",
        target_kind=model,
        target_name=name,
        actor_kind=AuditActorKind.USER,
        actor=user.get_username(),
    )


def _chosen_admin_action(request: HttpRequest) -> str:
    """The name of the bulk action a changelist POST runs (a name the admin defines, never a
    value anyone typed), or "" when it runs none."""
    chosen = request.POST.get("action", "")
    return chosen if _ADMIN_ACTION.fullmatch(chosen) else ""


def _selection(request: HttpRequest) -> str:
    """The objects a changelist POST acts on: their ids, or every one the filters match."""
    if request.POST.get("select_across") == "1":
        return "*"
    return ",".join(request.POST.getlist("_selected_action"))


def _note_admin_tenant(request: HttpRequest, model_admin: ModelAdmin, kwargs: dict) -> None:
    """The tenant of the object (or of every selected object) an admin write acts on, when
    the model is a tenant or has one: one read, admin writes only."""
    model = model_admin.model
    if "object_id" in kwargs:
        ids = [unquote(str(kwargs["object_id"]))]
    elif request.POST.get("select_across") != "1":
        ids = request.POST.getlist("_selected_action")
    else:
        ids = []
    if not ids:
        return
    try:
        if model is Tenant:
            rows = Tenant.objects.filter(pk__in=ids).values_list("pk", "slug")
        elif any(
            field.name == "tenant" and field.related_model is Tenant
            for field in model._meta.concrete_fields
        ):
            rows = model._default_manager.filter(pk__in=ids).values_list(
                "tenant_id", "tenant__slug"
            )
        else:
            return
        tenants = list(rows.order_by().distinct()[:2])
    except (ValueError, ValidationError):  # not an id of this model: the view says 404
        return
    if len(tenants) == 1:
        current = _note_of(request)
        current.tenant_id, current.tenant_slug = tenants[0]


def _target_argument(kwargs: Mapping[str, Any]) -> str:
    for argument in _TARGET_ARGUMENTS:
        if kwargs.get(argument):
            return str(kwargs[argument])
    return ""


def _signed_in(request: HttpRequest, user_before: Any) -> Any:
    """The signed-in user the request acted as: after it (a login), else before it (a
    logout); None for an anonymous one."""
    for user in (getattr(request, "user", None), user_before):
        if user is not None and user.is_authenticated:
            return user
    return None


def _warned(request: HttpRequest) -> bool:
    """Whether the page queued a warning or an error for the next page (a refusal it
    redirects with). Read from the storage's queue, not by iterating the storage, which
    would mark messages read and lose those the next page has yet to show."""
    storage = getattr(request, "_messages", None)
    queued = getattr(storage, "_queued_messages", ())
    return any(message.level >= messages.WARNING for message in queued)


def _error_code(response: HttpResponseBase) -> str:
    """The `error.code` of an API answer's envelope ("" when it has none)."""
    data = getattr(response, "data", None)
    if data is None and isinstance(response, HttpResponse):
        if not response.get("Content-Type", "").startswith("application/json"):
            return ""
        if len(response.content) > _ERROR_BODY_BYTES:
            return ""
        try:
            data = json.loads(response.content)
        except ValueError:
            return ""
    error = data.get("error") if isinstance(data, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else ""


def _address(request: HttpRequest) -> str | None:
    try:
        return str(ipaddress.ip_address(client_address(request)))
    except ValueError:
        return None
