"""Read-only admin views of the inventory mirror (it is rewritten by every sync), and the
cluster registry ops edit."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from controlplane.admin import readable_bytes, readable_cpu
from inventory import clusters
from inventory.models import (
    Claim,
    Cluster,
    Device,
    DeviceClass,
    DevicePool,
    Node,
    Quota,
    SyncRun,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class DeviceClassFilter(admin.SimpleListFilter):
    title = "device class"
    parameter_name = "device_class"

    def lookups(self, request, model_admin):
        return [(name, name) for name in DeviceClass.objects.values_list("name", flat=True)]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(device_classes__contains=[self.value()])
        return queryset


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "ready",
        "cpu_allocatable",
        "cpu_requested",
        "memory_allocatable",
        "memory_requested",
    )
    list_filter = ("ready",)
    search_fields = ("name",)
    fields = (
        "name",
        "ready",
        "cpu_allocatable",
        "cpu_requested",
        "memory_allocatable",
        "memory_requested",
        "labels",
    )
    readonly_fields = fields

    @admin.display(description="CPU allocatable", ordering="cpu_allocatable_millicores")
    def cpu_allocatable(self, node: Node) -> str:
        return readable_cpu(node.cpu_allocatable_millicores)

    @admin.display(description="CPU requested", ordering="cpu_requested_millicores")
    def cpu_requested(self, node: Node) -> str:
        return readable_cpu(node.cpu_requested_millicores)

    @admin.display(description="memory allocatable", ordering="memory_allocatable_bytes")
    def memory_allocatable(self, node: Node) -> str:
        return readable_bytes(node.memory_allocatable_bytes)

    @admin.display(description="memory requested", ordering="memory_requested_bytes")
    def memory_requested(self, node: Node) -> str:
        return readable_bytes(node.memory_requested_bytes)


@admin.register(Device)
class DeviceAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "pool",
        "node_name",
        "product",
        "allocated",
        "tainted",
        "claim_namespace",
        "claim_name",
        "pool_complete",
    )
    list_filter = (
        DeviceClassFilter,
        "node_name",
        "allocated",
        "tainted",
        "pool_complete",
        "product",
    )
    search_fields = ("name", "pool", "node_name", "claim_name")


@admin.register(DevicePool)
class DevicePoolAdmin(ReadOnlyAdmin):
    list_display = (
        "driver",
        "name",
        "node_name",
        "generation",
        "slices_seen",
        "slice_count",
        "complete",
    )
    list_filter = ("complete", "driver")


@admin.register(DeviceClass)
class DeviceClassAdmin(ReadOnlyAdmin):
    list_display = ("name", "selectors")


@admin.register(Claim)
class ClaimAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "allocated", "node_name")
    list_filter = ("allocated", "namespace")
    search_fields = ("name", "namespace")


@admin.register(Quota)
class QuotaAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "hard", "used")


@admin.register(SyncRun)
class SyncRunAdmin(ReadOnlyAdmin):
    list_display = ("started_at", "duration_ms", "total_devices", "allocated_devices", "error")
    list_filter = ("started_at",)


class ClusterForm(forms.ModelForm):
    class Meta:
        model = Cluster
        fields = (
            "name",
            "display_name",
            "region",
            "position",
            "enabled",
            "cordoned",
            "kubeconfig",
            "kube_context",
            "pod_cidrs",
            "service_cidrs",
            "node_cidrs",
            "properties",
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        instance = self.instance
        leaving = instance.pk and instance.enabled and not data.get("enabled", True)
        if leaving and (count := clusters.live_units(instance.name)):
            raise ValidationError(
                f"{instance.name} holds {count} live unit(s): it stays enabled until they "
                "are deleted (cordon it to place nothing new there)."
            )
        return data


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    """The cluster registry: ops add, cordon and order clusters here (or import ClusterProfiles:
    `manage.py import_clusters`). A cluster's name is what its units record: fixed once made."""

    form = ClusterForm
    list_display = (
        "name",
        "display_name",
        "region",
        "enabled",
        "cordoned",
        "position",
        "live_units",
    )
    list_editable = ("cordoned", "position")
    list_filter = ("region", "enabled", "cordoned")
    search_fields = ("name", "display_name", "region")
    fieldsets = (
        (None, {"fields": ("name", "display_name", "region", "position")}),
        ("Placement", {"fields": ("enabled", "cordoned")}),
        ("Reach", {"fields": ("kubeconfig", "kube_context")}),
        (
            "Own ranges (never reached by a unit's internet rules)",
            {"fields": ("pod_cidrs", "service_cidrs", "node_cidrs")},
        ),
        ("ClusterProfile", {"fields": ("properties",), "classes": ("collapse",)}),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> tuple:
        return ("name",) if obj is not None else ()

    @admin.display(description="live units")
    def live_units(self, cluster: Cluster) -> str:
        """What still runs there (a cordoned cluster drains as its units are deleted), linked
        to those units in the admin."""
        count = clusters.live_units(cluster.name)
        url = (
            f"{reverse('admin:runtime_gpuunit_changelist')}?{urlencode({'cluster': cluster.name})}"
        )
        return format_html('<a href="{}">{}</a>', url, count)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # A cluster holding live units stays: they are observed and reconciled through it.
        return super().has_delete_permission(request, obj) and (
            not isinstance(obj, Cluster) or not clusters.live_units(obj.name)
        )
