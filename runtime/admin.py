"""Admin for tenants, their keys, units, operations and timelines."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest

from runtime import services
from runtime.models import ApiKey, GPUUnit, Operation, Tenant, UnitEvent


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ("name", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "created_at", "last_used_at")
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # keys are created by the action below, so the secret can be shown once


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = (
        "slug",
        "display_name",
        "namespace",
        "quota_cpu",
        "quota_memory",
        "quota_claims",
        "is_operator",
    )
    list_filter = ("is_operator",)
    search_fields = ("slug", "display_name", "namespace")
    filter_horizontal = ("users",)
    inlines = [ApiKeyInline]
    actions = ["create_key"]

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None):
        # Units live in the namespace: moving a tenant would orphan them. The usage counters
        # are kept by orders and terminations (and recounted by reconcile_units), never typed.
        if obj is None:
            return ()
        return ("namespace", "used_cpu_millicores", "used_memory_bytes", "used_claims")

    @admin.action(description="Create an API key (shown once)")
    def create_key(self, request: HttpRequest, queryset) -> None:
        for tenant in queryset:
            _api_key, key = services.create_api_key(tenant=tenant, name="admin")
            self.message_user(
                request,
                f"New key for {tenant.slug} (copy it now, it is not stored): {key}",
                messages.WARNING,
            )


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "tenant", "name", "created_at", "last_used_at", "revoked_at")
    list_filter = ("tenant",)
    search_fields = ("prefix", "name", "tenant__slug")
    readonly_fields = ("tenant", "prefix", "created_at", "last_used_at", "revoked_at")
    fields = ("tenant", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset) -> None:
        for api_key in queryset:
            services.revoke_api_key(api_key=api_key)
        self.message_user(request, f"{queryset.count()} key(s) revoked.", messages.SUCCESS)


class UnitEventInline(admin.TabularInline):
    model = UnitEvent
    extra = 0
    can_delete = False
    fields = ("last_seen", "type", "reason", "message", "count")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(GPUUnit)
class GPUUnitAdmin(admin.ModelAdmin):
    list_display = ("name", "tenant", "package_id", "phase", "reason", "node_name", "created_at")
    list_filter = ("phase", "tenant", "package_id")
    search_fields = ("name", "operation_id", "tenant__slug")
    list_select_related = ("tenant",)
    inlines = [UnitEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # units are ordered through the API or the dashboard

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Operation)
class OperationAdmin(admin.ModelAdmin):
    list_display = (
        "operation_id",
        "tenant",
        "kind",
        "status",
        "attempts",
        "error_code",
        "updated_at",
    )
    list_filter = ("kind", "status", "tenant")
    search_fields = ("operation_id", "unit__name")
    list_select_related = ("tenant",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
