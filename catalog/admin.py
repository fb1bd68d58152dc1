"""Ops edit the catalog here: inline validation, an active toggle and YAML export."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse

from catalog.models import Package
from catalog.services import export_catalog


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
            "cpu",
            "memory",
            "gpu",
            "device_class_name",
            "claim_request_name",
            "count",
            "selectors",
            "capacity",
        ]


@admin.register(Package)
class PackageAdmin(admin.ModelAdmin):
    form = PackageForm
    list_display = (
        "id",
        "spec_name",
        "gpu",
        "device_class_name",
        "cpu",
        "memory",
        "active",
        "updated_at",
    )
    list_editable = ("active",)
    list_filter = ("active", "device_class_name", "gpu")
    search_fields = ("id", "spec_name", "device_class_name")
    ordering = ("id",)
    readonly_fields = ("created_at", "updated_at")
    actions = ("export_yaml", "activate", "deactivate")
    fieldsets = (
        (None, {"fields": ("id", "spec_name", "active")}),
        ("Resources", {"fields": ("cpu", "memory", "gpu")}),
        (
            "DRA allocation",
            {
                "fields": (
                    "device_class_name",
                    "claim_request_name",
                    "count",
                    "selectors",
                    "capacity",
                )
            },
        ),
        ("History", {"fields": ("created_at", "updated_at")}),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Package | None = None):
        # The ID is the primary key customers order by: renaming would orphan their references.
        if obj is not None:
            return ("id", *self.readonly_fields)
        return self.readonly_fields

    @admin.action(description="Export selected packages as YAML")
    def export_yaml(self, request: HttpRequest, queryset) -> HttpResponse:
        response = HttpResponse(export_catalog(packages=queryset), content_type="application/yaml")
        response["Content-Disposition"] = 'attachment; filename="packages.yaml"'
        return response

    @admin.action(description="Activate selected packages")
    def activate(self, request: HttpRequest, queryset) -> None:
        updated = queryset.update(active=True)
        self.message_user(request, f"{updated} package(s) activated.", messages.SUCCESS)

    @admin.action(description="Deactivate selected packages")
    def deactivate(self, request: HttpRequest, queryset) -> None:
        updated = queryset.update(active=False)
        self.message_user(request, f"{updated} package(s) deactivated.", messages.SUCCESS)
