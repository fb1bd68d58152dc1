"""Admin for tenants and their keys, and the audit log (read only). A key is created from
"API keys → Add" or a tenant action, through the tenancy service, and its secret is shown on the
response page once: it is never stored, so it goes neither into the database nor into a message
cookie."""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from controlplane.admin import readable_bytes, readable_cpu
from tenancy import audit, services
from tenancy.models import ApiKey, AuditEvent, SSHKey, Tenant, WebhookDelivery, WebhookEndpoint

SECRET_TEMPLATE = "admin/tenancy/apikey/secret.html"


def render_new_secrets(
    request: HttpRequest, *, keys: list[tuple[ApiKey, str]], context: dict
) -> HttpResponse:
    # No cache keeps the page: the admin's views are never_cache (Cache-Control: no-store).
    return TemplateResponse(request, SECRET_TEMPLATE, {**context, "new_keys": keys})


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ("name", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "created_at", "last_used_at")
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Tenant | None = None) -> bool:
        return False  # a key made inline could not show its secret: API keys → Add does


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = (
        "slug",
        "display_name",
        "namespace",
        "cpu_usage",
        "memory_usage",
        "claim_usage",
        "monthly_budget",
        "budget_mode",
        "is_operator",
    )
    list_filter = ("is_operator", "budget_mode")
    search_fields = ("slug", "display_name", "namespace")
    filter_horizontal = ("users",)
    inlines = [ApiKeyInline]
    actions = ["create_key"]

    def get_readonly_fields(
        self, request: HttpRequest, obj: Tenant | None = None
    ) -> tuple[str, ...]:
        # Units live in the namespace: moving a tenant would orphan them. The usage counters
        # are kept by orders and terminations (and recounted by recount_usage), never typed.
        if obj is None:
            return ()
        return ("namespace", "used_cpu", "used_memory", "used_claims")

    @admin.display(description="CPU used")
    def used_cpu(self, tenant: Tenant) -> str:
        return readable_cpu(tenant.used_cpu_millicores)

    @admin.display(description="memory used")
    def used_memory(self, tenant: Tenant) -> str:
        return readable_bytes(tenant.used_memory_bytes)

    @admin.display(description="CPU used of quota", ordering="used_cpu_millicores")
    def cpu_usage(self, tenant: Tenant) -> str:
        used, quota = tenant.used_cpu_millicores, tenant.quota_cpu_millicores
        return f"{readable_cpu(used)} of {readable_cpu(quota)}"

    @admin.display(description="memory used of quota", ordering="used_memory_bytes")
    def memory_usage(self, tenant: Tenant) -> str:
        used, quota = tenant.used_memory_bytes, tenant.quota_memory_bytes
        return f"{readable_bytes(used)} of {readable_bytes(quota)}"

    @admin.display(description="claims used of quota", ordering="used_claims")
    def claim_usage(self, tenant: Tenant) -> str:
        return f"{tenant.used_claims} of {tenant.quota_claims}"

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            audit.note(request, tenant=obj, target_name=str(obj.pk))

    @admin.action(description="Create an API key (shown once)")
    def create_key(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> HttpResponse:
        keys = [services.create_api_key(tenant=tenant, name="admin") for tenant in queryset]
        # Done: the answer is the page showing the secrets, not a redirect.
        audit.note(request, succeeded=True)
        context = {
            **self.admin_site.each_context(request),
            "opts": ApiKey._meta,
            "title": "New API keys",
        }
        return render_new_secrets(request, keys=keys, context=context)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "tenant", "name", "created_at", "last_used_at", "revoked_at")
    list_filter = ("tenant",)
    list_select_related = ("tenant",)
    search_fields = ("prefix", "name", "tenant__slug")
    readonly_fields: ClassVar[tuple[str, ...]] = (
        "tenant",
        "prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    fields: ClassVar[tuple[str, ...]] = (
        "tenant",
        "name",
        "prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    actions = ["revoke"]

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("tenant", "name")  # the service makes the rest
        return self.fields

    def get_readonly_fields(
        self, request: HttpRequest, obj: ApiKey | None = None
    ) -> tuple[str, ...]:
        return () if obj is None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        api_key, secret = services.create_api_key(tenant=obj.tenant, name=obj.name)
        # The admin goes on with `obj` (its history entry, the response): make it the saved key.
        for field in ApiKey._meta.concrete_fields:
            setattr(obj, field.attname, getattr(api_key, field.attname))
        obj._state.adding = False
        obj._state.db = api_key._state.db
        # Only in memory, for response_add: the secret is never stored.
        obj.new_secret = secret  # type: ignore[attr-defined]
        audit.note(request, tenant=obj.tenant, target_name=str(api_key.pk), succeeded=True)

    def response_add(
        self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None
    ) -> HttpResponse:
        secret = getattr(obj, "new_secret", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "New API key",
        }
        return render_new_secrets(request, keys=[(obj, secret)], context=context)

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for api_key in queryset:
            services.revoke_api_key(api_key=api_key)
        self.message_user(request, f"{queryset.count()} key(s) revoked.", messages.SUCCESS)


@admin.register(SSHKey)
class SSHKeyAdmin(admin.ModelAdmin):
    """Tenants register their keys through the API or the dashboard; ops see and remove them."""

    list_display = ("name", "tenant", "kind", "bits", "fingerprint", "created_at")
    list_filter = ("kind", "tenant")
    search_fields = ("name", "fingerprint", "comment", "tenant__slug")
    readonly_fields = ("tenant", "name", "kind", "bits", "fingerprint", "comment", "public_key")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: SSHKey | None = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: SSHKey) -> None:
        # Through the service, so the units that used the key lose it too.
        services.remove_ssh_key(tenant=obj.tenant, name=obj.name)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[SSHKey]) -> None:
        for key in queryset.select_related("tenant"):
            services.remove_ssh_key(tenant=key.tenant, name=key.name)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """The audit log, read only: nobody adds, changes or deletes an entry (the database
    refuses the last two as well)."""

    list_display = (
        "occurred_at",
        "source",
        "actor",
        "tenant_slug",
        "action",
        "target_kind",
        "target_name",
        "status",
        "outcome",
        "request_id",
    )
    list_filter = ("source", "outcome", "actor_kind", "occurred_at")
    search_fields = ("actor", "tenant_slug", "action", "target_name", "request_id", "path")
    date_hierarchy = "occurred_at"
    # The id is the order events were written in; a page counts nothing (estimates only).
    ordering = ("-id",)
    show_full_result_count = False
    fields = (
        "uid",
        "occurred_at",
        "source",
        "actor_kind",
        "actor",
        "tenant_id",
        "tenant_slug",
        "action",
        "target_kind",
        "target_name",
        "method",
        "path",
        "status",
        "outcome",
        "error_code",
        "request_id",
        "remote_address",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False


class WebhookDeliveryInline(admin.TabularInline):
    model = WebhookDelivery
    fields = ("event_type", "status", "attempts", "created_at", "last_status", "last_error")
    readonly_fields = fields
    ordering = ("-id",)
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True

    def get_queryset(self, request: HttpRequest) -> QuerySet[WebhookDelivery]:
        # The newest deliveries only: an endpoint's log can be long.
        newest = super().get_queryset(request).order_by("-id").values("pk")[:20]
        return super().get_queryset(request).filter(pk__in=newest)


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    """Tenants add their webhooks through the API (gpuctl webhooks); ops see them and their
    latest deliveries, turn them off (enabled) and remove them. The secret is never shown."""

    list_display = ("uid", "tenant", "url", "enabled", "created_at")
    list_filter = ("enabled", "tenant")
    search_fields = ("url", "description", "tenant__slug", "uid")
    fields = ("uid", "tenant", "url", "events", "description", "enabled", "created_at")
    readonly_fields = ("uid", "tenant", "url", "events", "description", "created_at")
    inlines = (WebhookDeliveryInline,)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    """Every delivery and its attempts, read only: what a tenant asks support about."""

    list_display = ("uid", "endpoint", "event_type", "status", "attempts", "created_at")
    list_filter = ("status", "event_type")
    search_fields = ("uid", "event_id", "endpoint__url", "endpoint__tenant__slug")
    list_select_related = ("endpoint",)
    fields = (
        "uid",
        "endpoint",
        "event_id",
        "event_type",
        "ordering_key",
        "status",
        "attempts",
        "created_at",
        "next_attempt_at",
        "finished_at",
        "last_status",
        "last_error",
        "payload",
        "attempt_log",
    )
    readonly_fields = fields

    @admin.display(description="attempts (oldest first)")
    def attempt_log(self, delivery: WebhookDelivery) -> str:
        return "\n".join(
            f"{attempt.at:%Y-%m-%d %H:%M:%S} {attempt.status or '-'} {attempt.error} "
            f"({attempt.duration_ms} ms)"
            for attempt in delivery.attempt_log.all()
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: WebhookDelivery | None = None
    ) -> bool:
        return False
