"""Admin for units, operations and timelines (read-only: they change through the API)."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib import admin
from django.http import HttpRequest

from catalog import admin as catalog_admin
from runtime.models import GPUStorage, GPUUnit, Operation, Reservation, UnitEvent


def count_live_units(package_ids: Iterable[str]) -> int:
    return GPUUnit.objects.live().filter(package_id__in=list(package_ids)).count()


# The catalog's delete confirmation says how many live units a package has (catalog is below).
catalog_admin.register_live_unit_counter(count_live_units)


class UnitEventInline(admin.TabularInline):
    model = UnitEvent
    extra = 0
    can_delete = False
    fields = ("last_seen", "type", "reason", "message", "count")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(GPUUnit)
class GPUUnitAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "tenant",
        "package_id",
        "phase",
        "reason",
        "region",
        "cluster",
        "node_name",
        "created_at",
    )
    list_filter = ("phase", "region", "cluster", "tenant", "package_id")
    search_fields = ("name", "operation_id", "tenant__slug")
    list_select_related = ("tenant",)
    inlines = [UnitEventInline]
    # cpu and memory are shown as ordered ("10", "40Gi"); these are their integer copies.
    exclude = ("cpu_millicores", "memory_bytes")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # units are ordered through the API or the dashboard

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
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

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    """Tenants make and cancel reservations through the API; ops see them here, read-only
    (beat starts and ends them)."""

    list_display = (
        "name",
        "tenant",
        "package",
        "count",
        "start",
        "end",
        "cluster",
        "status",
        "held",
    )
    list_filter = ("status", "region", "cluster", "tenant")
    search_fields = ("name", "tenant__slug", "package__id")
    readonly_fields = [field.name for field in Reservation._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Reservation | None = None) -> bool:
        return False


@admin.register(GPUStorage)
class GPUStorageAdmin(admin.ModelAdmin):
    """Tenants create and delete storages through the API and the dashboard (a worker makes
    the claim); ops see them here, read-only."""

    list_display = (
        "name",
        "tenant",
        "size",
        "access_mode",
        "storage_class",
        "region",
        "cluster",
        "phase",
        "created_at",
    )
    list_filter = ("phase", "access_mode", "region", "cluster", "tenant")
    search_fields = ("name", "tenant__slug")
    readonly_fields = [field.name for field in GPUStorage._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: GPUStorage | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: GPUStorage | None = None) -> bool:
        return False  # deleting the row would orphan its claim: use the API
