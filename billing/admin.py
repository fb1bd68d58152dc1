"""The ledger and price history for ops, read-only: prices change in the package's admin
(each save records a version), usage only through the ledger's writers. A correction is the
one write: the "Reverse" action adds a row negating the chosen ones (billing.ledger.reverse)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from billing import ledger
from billing.models import Meter, PriceVersion, UsageExport, UsageRecord


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(PriceVersion)
class PriceVersionAdmin(ReadOnlyAdmin):
    list_display = ("package_id", "alternative", "hourly", "currency", "effective_from")
    list_filter = ("currency",)
    search_fields = ("package_id", "alternative")
    date_hierarchy = "effective_from"


@admin.register(Meter)
class MeterAdmin(ReadOnlyAdmin):
    list_display = (
        "unit_name",
        "tenant",
        "region",
        "package_id",
        "alternative",
        "count",
        "quantity_unit",
        "opened_at",
        "started_at",
        "seen_at",
    )
    list_select_related = ("tenant",)
    search_fields = ("unit_name", "unit_uid", "tenant__slug", "package_id")


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "start",
        "end",
        "tenant",
        "unit_name",
        "region",
        "package_id",
        "alternative",
        "quantity",
        "quantity_unit",
        "hourly",
        "cost",
        "currency",
        "corrects",
    )
    list_filter = ("quantity_unit", "currency", "package_id")
    list_select_related = ("tenant",)
    search_fields = ("id", "unit_name", "unit_uid", "tenant__slug", "package_id", "claim_uid")
    date_hierarchy = "start"
    actions = ("reverse_selected",)

    @admin.action(description="Reverse selected rows (a correction row each)")
    def reverse_selected(self, request: HttpRequest, queryset: QuerySet[UsageRecord]) -> None:
        done = 0
        with transaction.atomic():
            for record in queryset.filter(corrects__isnull=True, correction__isnull=True):
                ledger.reverse(record, note=f"reversed by {request.user} in the admin")
                done += 1
        self.message_user(request, f"{done} row(s) reversed.", messages.SUCCESS)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # Read-only for everyone but those who may change the ledger's rows.
        actions = super().get_actions(request)
        if not request.user.has_perm("billing.change_usagerecord"):
            actions.pop("reverse_selected", None)
        return actions


@admin.register(UsageExport)
class UsageExportAdmin(ReadOnlyAdmin):
    """Exports as operators requested them (POST /api/v1/operator/usage/exports); deleting
    one drops its stored bytes (beat deletes them after BILLING_EXPORT_RETENTION_HOURS)."""

    list_display = (
        "id",
        "format",
        "start",
        "end",
        "state",
        "rows_done",
        "rows_total",
        "size",
        "requested_by",
        "created_at",
        "finished_at",
    )
    list_filter = ("state", "format")

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return bool(request.user.is_superuser)
