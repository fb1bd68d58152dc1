"""Keyset (cursor) pagination on a descending integer key: stable under inserts, one query."""

from __future__ import annotations

import base64
import binascii

from django.db.models import QuerySet

from controlplane.api.errors import InvalidRequest

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


def _decode(cursor: str) -> int:
    try:
        value = int(base64.urlsafe_b64decode(cursor.encode() + b"==").decode())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidRequest(
            "cursor is not valid.", details={"fields": {"cursor": ["Invalid."]}}
        ) from None
    return value


def _encode(value: int) -> str:
    return base64.urlsafe_b64encode(str(value).encode()).decode().rstrip("=")


def parse_limit(raw: str | None) -> int:
    if raw in (None, ""):
        return DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise InvalidRequest(
            f"limit must be an integer from 1 to {MAX_LIMIT}.",
            details={"fields": {"limit": [f"Between 1 and {MAX_LIMIT}."]}},
        )
    return int(raw)


def paginate(queryset: QuerySet, *, cursor: str | None, limit: int, key: str = "id"):
    """Return (page, next_cursor) for a queryset ordered by `-key`."""
    if cursor:
        queryset = queryset.filter(**{f"{key}__lt": _decode(cursor)})
    rows = list(queryset.order_by(f"-{key}")[: limit + 1])
    page, more = rows[:limit], len(rows) > limit
    return page, (_encode(getattr(page[-1], key)) if more else None)
