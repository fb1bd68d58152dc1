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
