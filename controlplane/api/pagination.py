"""Keyset (cursor) pagination on a descending integer key: stable under inserts, one query.

The cursor a client gets is opaque and bound to what it paged: it names the last row by a
value the client already sees (its `uid`), never by the platform-wide row id (which would let
a tenant count everyone else's orders between two pages), and it is signed with a scope (the
tenant and the filters) so a cursor from another tenant or another filter is refused, not
reinterpreted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core import signing
from django.db.models import QuerySet, Subquery
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
_SALT = "controlplane.api.pagination"


def cursor_scope(*parts: object) -> str:
    """The scope a cursor is valid in: who pages, and through which filters."""
    return "|".join("" if part is None else str(part) for part in parts)


def _signer(scope: str) -> signing.Signer:
    return signing.Signer(salt=f"{_SALT}:{scope}")


def encode_cursor(position: str, scope: str) -> str:
    return _signer(scope).sign_object(position)


def decode_cursor(token: str, scope: str) -> str:
    try:
        position = _signer(scope).unsign_object(token)
    except signing.BadSignature:
        raise ValidationError(
            {"cursor": ["Not a cursor of this list: pass meta.nextCursor with the same filters."]}
        ) from None
    if not isinstance(position, str):
        raise ValidationError({"cursor": ["Not a cursor of this list."]})
    return position


def paginate(
    queryset: QuerySet,
    *,
    cursor: str | None,
    limit: int,
    scope: str,
    key: str = "id",
    position: str = "uid",
    newest_first: bool = True,
) -> tuple[list[Any], str | None]:
    """(page, next_cursor) for `queryset` ordered by `key` (descending unless `newest_first`
    is off: a timeline reads oldest first); cursors name rows by `position`."""
    if cursor:
        after = queryset.model.objects.filter(**{position: decode_cursor(cursor, scope)})
        beyond = "lt" if newest_first else "gt"
        queryset = queryset.filter(**{f"{key}__{beyond}": Subquery(after.values(key)[:1])})
    rows = list(queryset.order_by(f"-{key}" if newest_first else key)[: limit + 1])
    page, more = rows[:limit], len(rows) > limit
    return page, (encode_cursor(str(getattr(page[-1], position)), scope) if more else None)


def page_body(
    queryset: QuerySet,
    query: Mapping[str, Any],
    *,
    scope: str,
    serializer: type[serializers.Serializer],
    key: str = "id",
    position: str = "uid",
    newest_first: bool = True,
) -> dict[str, Any]:
    """The body of a paged list: `data` and `meta.nextCursor`, from `query`'s `limit` and
    `cursor` (see paginate for the order)."""
    page, next_cursor = paginate(
        queryset,
        cursor=query.get("cursor"),
        limit=query["limit"],
        scope=scope,
        key=key,
        position=position,
        newest_first=newest_first,
    )
    return {"data": serializer(page, many=True).data, "meta": {"nextCursor": next_cursor}}


def page_by_name(
    queryset: QuerySet,
    query: Mapping[str, Any],
    *,
    scope: str,
    serializer: type[serializers.Serializer],
) -> dict[str, Any]:
    """The body of a paged list of named things (a tenant's SSH keys, its secrets) in name
    order."""
    return page_body(
        queryset,
        query,
        scope=scope,
        serializer=serializer,
        key="name",
        position="name",
        newest_first=False,
    )


class PageQuerySerializer(serializers.Serializer):
    """Query parameters of a paged list: `limit` and the `cursor` of the page before."""

    cursor = serializers.CharField(
        max_length=512, required=False, help_text="meta.nextCursor of the previous page (opaque)"
    )
    limit = serializers.IntegerField(
        min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT, help_text="page size"
    )
