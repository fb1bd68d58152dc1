"""GET /quota: what the tenant may use, what it uses and what is free, per limit, with its
month's cost so far and what it has committed."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from billing import budgets as billing_budgets
from billing import periods as billing_periods
from billing import selectors as billing_selectors
from controlplane.api.schema import envelope, error_responses
from dracel import quantity
from runtime import access as unit_access
from runtime import logs, selectors, tenant_secrets
from tenancy import selectors as tenancy_selectors
from tenancy.selectors import usage_of
from tenancy.views import TenantView

_quota_line: dict[str, serializers.Field] = {
    "hard": serializers.CharField(),
    "used": serializers.CharField(),
    "free": serializers.CharField(),
}


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {
            "type": "object",
            "properties": {name: {"type": "string"} for name in ("hard", "used", "free")},
            "required": ["hard", "used", "free"],
        },
    }
)
class _DeviceQuotaField(serializers.JSONField):
    """{device class: {hard, used, free}} (devices)."""


class QuotaView(TenantView):
    """The tenant's quota, what its live units hold of it, and what is left."""

    @extend_schema(
        summary="The tenant's quota, usage and headroom",
        responses={
            200: envelope(
                inline_serializer(
                    name="Quota",
                    fields={
                        **{
                            name: inline_serializer(name=f"Quota_{name}", fields=_quota_line)
                            for name in ("cpu", "memory", "claims")
                        },
                        "devices": _DeviceQuotaField(
                            required=False,
                            help_text="per DeviceClass, when the tenant has a device quota "
                            "(used: its live units' claims and its reservations' free slots)",
                        ),
                        "regions": _DeviceQuotaField(
                            required=False,
                            help_text="devices per region, when the tenant has a quota in a "
                            "region: {region: {hard, used, free}} (reservations' free slots "
                            "count)",
                        ),
                        "limits": inline_serializer(
                            name="QuotaLimits",
                            fields={
                                "sshKeys": inline_serializer(
                                    name="Quota_sshKeys", fields=_quota_line
                                ),
                                "secrets": inline_serializer(
                                    name="Quota_secrets", fields=_quota_line
                                ),
                                "nodePorts": inline_serializer(
                                    name="Quota_nodePorts",
                                    fields=_quota_line,
                                    help_text="NodePorts the Services of units with tcp access "
                                    "or SSH hold (a stopped unit's too): one per port",
                                ),
                                "loadBalancers": inline_serializer(
                                    name="Quota_loadBalancers",
                                    fields=_quota_line,
                                    help_text="LoadBalancer Services, when units are exposed "
                                    "through load balancers",
                                ),
                                "logFollowers": inline_serializer(
                                    name="Quota_logFollowers",
                                    fields=_quota_line,
                                    help_text="followed logs open at once (GET "
                                    "/gpu-units/{name}/logs?follow=true); one more is a 429",
                                ),
                                "ephemeralStorage": inline_serializer(
                                    name="Quota_ephemeralStorage",
                                    fields=_quota_line,
                                    help_text="local disk the pods of running units may use "
                                    "(each unit: its package's ephemeral storage)",
                                ),
                                "storageClasses": serializers.ListField(
                                    child=serializers.CharField(),
                                    help_text="the StorageClasses a storage may name",
                                ),
                            },
                            help_text="counts the platform caps per tenant (ops settings)",
                        ),
                        "currency": serializers.CharField(help_text="of the costs (ISO 4217)"),
                        "costToDate": serializers.CharField(
                            help_text="what the tenant's units have cost, running ones to now"
                        ),
                        "costThisMonth": serializers.CharField(
                            help_text="the same since this UTC month began"
                        ),
                        "committed": serializers.CharField(
                            help_text="what the tenant's reservations commit it to from now to "
                            "their ends (every slot, at the package's price): the most they "
                            "can still cost"
                        ),
                    },
                ),
                name="QuotaResponse",
            ),
            **error_responses(401),
        },
    )
    def get(self, request: Request) -> Response:
        tenant = self.tenant
        usage = usage_of(tenant)
        lines = (
            ("cpu", tenant.quota_cpu_millicores, usage.cpu_millicores, quantity.format_cpu),
            ("memory", tenant.quota_memory_bytes, usage.memory_bytes, quantity.format_bytes),
            ("claims", tenant.quota_claims, usage.claims, str),
        )
        body: dict = {name: _line(hard, used, show) for name, hard, used, show in lines}
        if tenant.quota_devices:
            requested = selectors.devices_requested_by_class(tenant=tenant)
            body["devices"] = {
                name: _line(hard, requested.get(name, 0))
                for name, hard in sorted(tenant.quota_devices.items())
            }
        if tenant.quota_regions:
            held_in = selectors.devices_held_by_region(tenant=tenant)
            body["regions"] = {
                name: _line(hard, held_in.get(name, 0))
                for name, hard in sorted(tenant.quota_regions.items())
            }
        keys = tenancy_selectors.count_ssh_keys(tenant)
        held = selectors.exposure_held(tenant=tenant, config=unit_access.from_settings())
        disk = selectors.ephemeral_storage_requested(tenant=tenant)
        counted = (
            ("sshKeys", settings.SSH_KEYS_PER_TENANT, keys, str),
            ("secrets", settings.SECRETS_PER_TENANT, tenant_secrets.count_secrets(tenant), str),
            ("nodePorts", settings.NODE_PORTS_PER_TENANT, held.node_ports, str),
            ("loadBalancers", settings.LOAD_BALANCERS_PER_TENANT, held.load_balancers, str),
            ("logFollowers", settings.LOGS_FOLLOWERS_PER_TENANT, logs.followers_open(tenant), str),
            (
                "ephemeralStorage",
                tenant.quota_ephemeral_storage_bytes,
                disk,
                quantity.format_bytes,
            ),
        )
        body["limits"] = {name: _line(hard, used, show) for name, hard, used, show in counted}
        body["limits"]["storageClasses"] = list(settings.STORAGE_CLASSES)
        now = timezone.now()
        to_date, this_month = billing_selectors.tenant_costs(
            tenant, now=now, since=billing_periods.month_start(now)
        )
        body["currency"] = settings.BILLING_CURRENCY
        body["costToDate"] = billing_periods.cost_text(to_date)
        body["costThisMonth"] = billing_periods.cost_text(this_month)
        body["committed"] = billing_periods.cost_text(billing_budgets.committed(tenant, now=now))
        return Response(body)


def _line(hard: int, used: int, show: Callable[[int], str] = str) -> dict[str, str]:
    """One line of the quota: what may be used, what is, and what is left."""
    return {"hard": show(hard), "used": show(used), "free": show(max(0, hard - used))}
