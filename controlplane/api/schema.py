"""OpenAPI helpers: describe the envelope once so every endpoint documents it the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING

from drf_spectacular.utils import OpenApiResponse, extend_schema_serializer, inline_serializer
from rest_framework import serializers

if TYPE_CHECKING:
    from drf_spectacular.generators import SchemaGenerator
    from rest_framework.request import Request


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField()


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


def envelope(
    serializer: serializers.Serializer | type,
    *,
    name: str,
    many: bool = False,
    meta: serializers.Serializer | None = None,
) -> serializers.Serializer:
    """A schema component `{"data": <serializer>}` (and `meta`, when given) named `name`."""
    data = serializer(many=many) if isinstance(serializer, type) else serializer
    fields = {"data": data} if meta is None else {"data": data, "meta": meta}
    wrapper = inline_serializer(name=name, fields=fields)
    # The envelope itself is never a list, even on list views (where spectacular would wrap it).
    extend_schema_serializer(many=False)(type(wrapper))
    return wrapper


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    return {
        code: OpenApiResponse(ErrorSerializer, description="Error envelope") for code in statuses
    }


# Every API operation can answer these through the shared plumbing (auth, throttling, body
# limits, parsers), so they are documented once here rather than on each view.
_COMMON_ERRORS = {
    "401": "Missing, invalid or revoked API key",
    "405": "Method not allowed",
    "413": "Request body too large",
    "415": "Unsupported content type",
    "429": "Too many requests for this API key (see Retry-After)",
}


def add_common_errors(
    result: dict, generator: SchemaGenerator, request: Request | None, public: bool
) -> dict:
    """drf-spectacular postprocessing hook: document the shared error responses."""
    error_ref = {"$ref": "#/components/schemas/Error"}
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/") or path == "/api/v1/health":
            continue
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for status, description in _COMMON_ERRORS.items():
                responses.setdefault(
                    status,
                    {
                        "description": description,
                        "content": {"application/json": {"schema": error_ref}},
                    },
                )
    return result


# Every API operation's id and tag, in one scheme: the resource, then the verb (list, create,
# get, update, delete, or the action), so a generated client reads `units.create`,
# `units.stop`, `usage_exports.download`. A new route needs its line here: the schema is not
# generated without it (`make lint` generates it).
OPERATIONS: dict[tuple[str, str], tuple[str, str]] = {
    ("GET", "/api/v1/health"): ("health_get", "health"),
    ("GET", "/api/v1/packages"): ("packages_list", "packages"),
    ("GET", "/api/v1/packages/{id}"): ("packages_get", "packages"),
    ("GET", "/api/v1/regions"): ("regions_list", "regions"),
    ("GET", "/api/v1/gpu-units"): ("units_list", "units"),
    ("POST", "/api/v1/gpu-units"): ("units_create", "units"),
    ("GET", "/api/v1/gpu-units/{name}"): ("units_get", "units"),
    ("PATCH", "/api/v1/gpu-units/{name}"): ("units_update", "units"),
    ("DELETE", "/api/v1/gpu-units/{name}"): ("units_delete", "units"),
    ("POST", "/api/v1/gpu-units/{name}/stop"): ("units_stop", "units"),
    ("POST", "/api/v1/gpu-units/{name}/start"): ("units_start", "units"),
    ("POST", "/api/v1/gpu-units/{name}/restart"): ("units_restart", "units"),
    ("GET", "/api/v1/gpu-units/{name}/events"): ("units_events", "units"),
    ("GET", "/api/v1/gpu-units/{name}/logs"): ("units_logs", "units"),
    ("GET", "/api/v1/operations/{operation_id}"): ("operations_get", "operations"),
    ("GET", "/api/v1/quota"): ("quota_get", "quota"),
    ("GET", "/api/v1/reservations"): ("reservations_list", "reservations"),
    ("POST", "/api/v1/reservations"): ("reservations_create", "reservations"),
    ("GET", "/api/v1/reservations/{name}"): ("reservations_get", "reservations"),
    ("DELETE", "/api/v1/reservations/{name}"): ("reservations_delete", "reservations"),
    ("GET", "/api/v1/gpu-storages"): ("storages_list", "storages"),
    ("POST", "/api/v1/gpu-storages"): ("storages_create", "storages"),
    ("GET", "/api/v1/gpu-storages/{name}"): ("storages_get", "storages"),
    ("DELETE", "/api/v1/gpu-storages/{name}"): ("storages_delete", "storages"),
    ("GET", "/api/v1/ssh-keys"): ("ssh_keys_list", "ssh-keys"),
    ("POST", "/api/v1/ssh-keys"): ("ssh_keys_create", "ssh-keys"),
    ("GET", "/api/v1/ssh-keys/{name}"): ("ssh_keys_get", "ssh-keys"),
    ("DELETE", "/api/v1/ssh-keys/{name}"): ("ssh_keys_delete", "ssh-keys"),
    ("GET", "/api/v1/secrets"): ("secrets_list", "secrets"),
    ("POST", "/api/v1/secrets"): ("secrets_create", "secrets"),
    ("GET", "/api/v1/secrets/{name}"): ("secrets_get", "secrets"),
    ("DELETE", "/api/v1/secrets/{name}"): ("secrets_delete", "secrets"),
    ("GET", "/api/v1/budget"): ("budget_get", "billing"),
    ("GET", "/api/v1/usage"): ("usage_get", "billing"),
    ("GET", "/api/v1/usage/statements/{month}"): ("usage_statements_get", "billing"),
    ("GET", "/api/v1/operator/usage"): ("operator_usage_get", "operator"),
    ("GET", "/api/v1/operator/usage/exports"): ("usage_exports_list", "operator"),
    ("POST", "/api/v1/operator/usage/exports"): ("usage_exports_create", "operator"),
    ("GET", "/api/v1/operator/usage/exports/{id}"): ("usage_exports_get", "operator"),
    ("GET", "/api/v1/operator/usage/exports/{id}/download"): (
        "usage_exports_download",
        "operator",
    ),
    ("GET", "/api/v1/operator/inventory"): ("operator_inventory_get", "operator"),
    ("GET", "/api/v1/webhooks"): ("webhooks_list", "webhooks"),
    ("POST", "/api/v1/webhooks"): ("webhooks_create", "webhooks"),
    ("GET", "/api/v1/webhooks/{id}"): ("webhooks_get", "webhooks"),
    ("PATCH", "/api/v1/webhooks/{id}"): ("webhooks_update", "webhooks"),
    ("DELETE", "/api/v1/webhooks/{id}"): ("webhooks_delete", "webhooks"),
    ("POST", "/api/v1/webhooks/{id}/rotate-secret"): ("webhooks_rotate_secret", "webhooks"),
    ("POST", "/api/v1/webhooks/{id}/test"): ("webhooks_test", "webhooks"),
    ("GET", "/api/v1/webhooks/{id}/deliveries"): ("webhook_deliveries_list", "webhooks"),
    ("GET", "/api/v1/audit-events"): ("audit_events_list", "audit"),
    ("GET", "/api/v1/operator/audit-events"): ("operator_audit_events_list", "operator"),
}
TAGS = [
    {"name": "units", "description": "GPU units: order, read, update, stop, start, delete"},
    {"name": "packages", "description": "What can be ordered, and what fits now"},
    {"name": "regions", "description": "Where units run, and each region's clusters"},
    {"name": "operations", "description": "The status of any create, stop, start or update"},
    {
        "name": "reservations",
        "description": "Devices held for you ahead of time, for a window, billed while held",
    },
    {"name": "storages", "description": "Persistent volumes a unit mounts"},
    {"name": "ssh-keys", "description": "Public keys let into units with SSH"},
    {"name": "secrets", "description": "Values units read as environment variables"},
    {"name": "quota", "description": "The tenant's quota and what is left"},
    {"name": "billing", "description": "Usage, statements and the budget"},
    {
        "name": "webhooks",
        "description": "Signed event deliveries (Standard Webhooks, CloudEvents) and their log",
    },
    {
        "name": "audit",
        "description": "Who did what: every write through the API, the dashboard and the admin",
    },
    {
        "name": "operator",
        "description": "Operator keys only: every tenant's usage, exports, inventory, audit log",
    },
    {"name": "health", "description": "Whether the control plane and its dependencies answer"},
]


def name_operations(
    result: dict, generator: SchemaGenerator, request: Request | None, public: bool
) -> dict:
    """drf-spectacular postprocessing hook: each operation's id and tag from OPERATIONS."""
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            named = OPERATIONS.get((method.upper(), path))
            if named is None:
                raise LookupError(
                    f"{method.upper()} {path} has no operationId: add it to "
                    "controlplane.api.schema.OPERATIONS"
                )
            operation["operationId"], tag = named
            operation["tags"] = [tag]
    result["tags"] = TAGS
    return result
