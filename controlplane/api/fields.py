"""Serializer parts for what clients send: a string is a JSON string, never a number or a
boolean coerced into one (DRF's CharField turns `1e400` into "inf" and `12345` into "12345"),
and a body field the API does not define is refused, not ignored."""

from __future__ import annotations

from rest_framework import serializers


class StringField(serializers.CharField):
    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSerializer(serializers.Serializer):
    """Rejects fields the API does not define instead of silently ignoring them."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)
