"""Serializer parts for what clients send: a string is a JSON string, never a number or a
boolean coerced into one (DRF's CharField turns `1e400` into "inf" and `12345` into "12345"),
a body field the API does not define is refused, not ignored, and a moment is a time with its
offset or a date."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from datetime import UTC, date, datetime, time

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers


class StringField(serializers.CharField):
    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


def unknown_fields(data: object, fields: Iterable[str]) -> dict[str, list[str]]:
    """A problem for each field of `data` (a JSON object) that is not one of `fields`, naming
    the field it may be a misspelling of (`packageId`: did you mean packageID?)."""
    if not isinstance(data, dict):
        return {}
    known = list(fields)
    problems = {}
    for name in sorted(set(data) - set(known)):
        near = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6) or [
            field for field in known if field.lower() == str(name).lower()
        ]
        problems[name] = [f"Unknown field; did you mean {near[0]}?" if near else "Unknown field."]
    return problems


class StrictSerializer(serializers.Serializer):
    """Rejects fields the API does not define instead of silently ignoring them."""

    def to_internal_value(self, data):
        if unknown := unknown_fields(data, self.fields):
            raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.STR)
class Moment(serializers.Field):
    """An RFC 3339 time with its offset (`2026-12-01T17:00:00Z`) or a date (UTC midnight)."""

    # What periods can be cut from and rendered (a month either side stays representable).
    EARLIEST = datetime(1, 2, 1, tzinfo=UTC)
    LATEST = datetime(9999, 12, 1, tzinfo=UTC)
    default_error_messages = {
        "invalid": "Give an RFC 3339 time with an offset (2026-12-01T17:00:00Z) or a date "
        "(2026-12-01).",
        "range": "Give a time from 0001-02-01T00:00:00Z to 9999-12-01T00:00:00Z.",
    }

    def to_internal_value(self, data: object) -> datetime:
        text = str(data).strip()
        try:
            if len(text) == 10:
                moment = datetime.combine(date.fromisoformat(text), time(), tzinfo=UTC)
            else:
                moment = datetime.fromisoformat(text)
        except ValueError:
            self.fail("invalid")
        if moment.tzinfo is None:
            self.fail("invalid")
        try:
            moment = moment.astimezone(UTC)
        except OverflowError:  # year 1 east of UTC, year 9999 west of it
            self.fail("range")
        if not self.EARLIEST <= moment <= self.LATEST:
            self.fail("range")
        return moment

    def to_representation(self, value: datetime) -> str:
        return value.isoformat()
