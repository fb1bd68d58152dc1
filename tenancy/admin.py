"""Admin for tenants and their keys; keys are created by an action so the secret shows once."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest

from tenancy import services
from tenancy.models import ApiKey, Tenant


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
        # are kept by orders and terminations (and recounted by recount_usage), never typed.
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
