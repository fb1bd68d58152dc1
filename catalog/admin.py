"""Ops edit the catalog here: inline validation, an active toggle and YAML export. Deleting asks
first and says how many live units were ordered from the packages."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as delete_selected_confirmed
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from catalog import offers
from catalog.models import Package
from catalog.services import export_catalog

# Units live in the runtime, above the catalog: its admin hands over how to count the live ones
# ordered from some packages (register_live_unit_counter).
LiveUnitCounter = Callable[[Iterable[str]], int]
_live_unit_counter: LiveUnitCounter | None = None


def register_live_unit_counter(counter: LiveUnitCounter) -> None:
    global _live_unit_counter
    _live_unit_counter = counter


def count_live_units(package_ids: Iterable[str]) -> int:
    return _live_unit_counter(package_ids) if _live_unit_counter is not None else 0


class SelectorsField(forms.CharField):
    """CEL selectors edited one per line instead of as raw JSON."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 80})

    def prepare_value(self, value):
        if isinstance(value, list):
            return "\n".join(value)
        return value

    def to_python(self, value):
        text = super().to_python(value) or ""
        return [line.strip() for line in text.splitlines() if line.strip()]


class PackageForm(forms.ModelForm):
    selectors = SelectorsField(
        required=False, help_text="CEL device selectors, one per line (optional)."
    )

    class Meta:
        model = Package
        fields = [
            "id",
            "spec_name",
            "active",
            "regions",
            "cpu",
            "memory",
            "gpu",
            "device_class_name",
            "claim_request_name",
            "count",
            "selectors",
            "capacity",
            "match_attribute",
            "alternatives",
            "max_stop_after",
            "ephemeral_storage",
            "termination_grace_seconds",
            "price",
            "alternative_prices",
            "interruptible",
            "interruptible_price",
            "preemption_notice_seconds",
        ]
        help_texts = {
            "regions": "Comma-separated DNS labels, e.g. us-east,eu-west; empty: every region."
        }

    def clean(self) -> dict[str, Any]:
        """An active package must be able to place somewhere: its DeviceClass exists in a
        cluster and its selectors match a device there (catalog.offers; nothing is refused
        before the clusters have been seen). An inactive one may be prepared ahead."""
        cleaned = super().clean() or {}
        if cleaned.get("active") and not self.errors:
            problems = offers.placement_problems(
                cleaned.get("device_class_name") or "", cleaned.get("selectors") or []
            )
            for field, problem in problems.items():
                self.add_error(field, problem)
        return cleaned


@admin.register(Package)
class PackageAdmin(admin.ModelAdmin):
    form = PackageForm
    # What ops look for first on the left, so a 1,366 px screen shows it without scrolling:
    # whether it is on sale and where; the spec name is searched, not listed.
    list_display = (
        "id",
        "active",
        "sold_in",
        "gpu",
        "device_class_name",
        "cpu",
        "memory",
        "price",
        "interruptible",
        "updated_at",
    )
    list_editable = ("active",)
    list_filter = ("active", "interruptible", "device_class_name", "gpu")
    search_fields = ("id", "spec_name", "device_class_name")
    ordering = ("id",)
    readonly_fields: ClassVar[tuple[str, ...]] = ("created_at", "updated_at")
    actions = ("export_yaml", "activate", "deactivate", "delete_selected")

    def save_model(self, request: HttpRequest, obj: Package, form: Any, change: bool) -> None:
        """An inactive package is saved whatever the clusters have (ops prepare one ahead);
        what would keep it from placing once activated is said as a warning."""
        super().save_model(request, obj, form, change)
        if not obj.active:
            for problem in offers.placement_problems(obj.device_class_name, obj.selectors).values():
                self.message_user(request, f"Before activating it: {problem}", messages.WARNING)

    fieldsets = (
        (None, {"fields": ("id", "spec_name", "active", "regions")}),
        ("Resources", {"fields": ("cpu", "memory", "ephemeral_storage", "gpu")}),
        ("Stopping", {"fields": ("max_stop_after", "termination_grace_seconds")}),
        ("Price", {"fields": ("price", "alternative_prices")}),
        (
            "Interruptible",
            {"fields": ("interruptible", "interruptible_price", "preemption_notice_seconds")},
        ),
        (
            "DRA allocation",
            {
                "fields": (
                    "device_class_name",
                    "claim_request_name",
                    "count",
                    "selectors",
                    "capacity",
                    "match_attribute",
                    "alternatives",
                )
            },
        ),
        ("History", {"fields": ("created_at", "updated_at")}),
    )

    def get_readonly_fields(
        self, request: HttpRequest, obj: Package | None = None
    ) -> tuple[str, ...]:
        # The ID is the primary key customers order by: renaming would orphan their references.
        if obj is not None:
            return ("id", *self.readonly_fields)
        return self.readonly_fields

    @admin.display(description="regions", ordering="regions")
    def sold_in(self, package: Package) -> str:
        return ", ".join(package.regions) or "every region"

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        live_units = count_live_units([unquote(object_id)])
        return super().delete_view(
            request, object_id, {**(extra_context or {}), "live_units": live_units}
        )

    @admin.action(permissions=["delete"], description="Delete selected packages")
    def delete_selected(
        self, request: HttpRequest, queryset: QuerySet[Package]
    ) -> TemplateResponse | None:
        # Django's own action, its confirmation page told how many live units there are.
        response = delete_selected_confirmed(self, request, queryset)
        if isinstance(response, TemplateResponse) and response.context_data is not None:
            live_units = count_live_units(queryset.values_list("id", flat=True))
            response.context_data["live_units"] = live_units
        return response

    @admin.action(description="Export selected packages as YAML")
    def export_yaml(self, request: HttpRequest, queryset: QuerySet[Package]) -> HttpResponse:
        response = HttpResponse(export_catalog(packages=queryset), content_type="application/yaml")
        response["Content-Disposition"] = 'attachment; filename="packages.yaml"'
        return response

    @admin.action(description="Activate selected packages")
    def activate(self, request: HttpRequest, queryset: QuerySet[Package]) -> None:
        updated = queryset.update(active=True)
        self.message_user(request, f"{updated} package(s) activated.", messages.SUCCESS)

    @admin.action(description="Deactivate selected packages")
    def deactivate(self, request: HttpRequest, queryset: QuerySet[Package]) -> None:
        updated = queryset.update(active=False)
        self.message_user(request, f"{updated} package(s) deactivated.", messages.SUCCESS)
