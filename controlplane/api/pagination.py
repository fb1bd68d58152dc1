"""Keyset (cursor) pagination on a descending integer key: stable under inserts, one query.

The cursor is the last key of the previous page; clients treat it as opaque."""

from __future__ import annotations

from django.db.models import QuerySet

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


def paginate(queryset: QuerySet, *, cursor: int | None, limit: int, key: str = "id"):
    """Return (page, next_cursor) for a queryset ordered by `-key`."""
    if cursor is not None:
        queryset = queryset.filter(**{f"{key}__lt": cursor})
    rows = list(queryset.order_by(f"-{key}")[: limit + 1])
    page, more = rows[:limit], len(rows) > limit
    return page, (str(getattr(page[-1], key)) if more else None)
