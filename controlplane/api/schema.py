"""OpenAPI helpers: describe the envelope once so every endpoint documents it the same way."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField()


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


def envelope(serializer: serializers.Serializer | type, *, name: str, many: bool = False):
    """A schema component `{"data": <serializer>}` named `name`."""
    data = serializer(many=many) if isinstance(serializer, type) else serializer
    return inline_serializer(name=name, fields={"data": data})


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    return {
        code: OpenApiResponse(ErrorSerializer, description="Error envelope") for code in statuses
    }
