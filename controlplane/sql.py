"""Hand-written SQL that still speaks in models, for the few hot paths where the ORM's query
building costs more than the database work (the create API: see docs/benchmarks.md).

Column lists come from the models' own field metadata, so a field added to a model reaches
these statements without editing them, and rows come back as ordinary model instances."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from datetime import date, datetime
from functools import cache
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, models
from django.db.backends.utils import CursorWrapper


class _Preparing:
    """A psycopg cursor (server-side binding) that prepares each statement it runs: the server
    parses and plans it once per connection, then only binds and executes it."""

    def __init__(self, cursor: psycopg.Cursor) -> None:
        self._cursor = cursor

    def execute(self, query: str, params: Any = None) -> psycopg.Cursor:
        return self._cursor.execute(query, params, prepare=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


@contextlib.contextmanager
def cursor() -> Iterator[CursorWrapper]:
    """The cursor for hand-written hot statements: prepared ones (about half their database
    CPU, measured in docs/benchmarks.md) unless settings.DB_PREPARED_STATEMENTS is off or
    queries are being logged (DEBUG, tests capturing queries: Django's log shows the SQL of
    its own cursors only). Django's own queries keep its client-side binding. Wrapped like any
    Django cursor: execute_wrapper and the translation of database errors (IntegrityError, ...)
    apply."""
    if not settings.DB_PREPARED_STATEMENTS or connection.queries_logged:
        with connection.cursor() as plain:
            yield plain
        return
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = psycopg.Cursor(connection.connection)
    try:
        yield connection.make_cursor(_Preparing(raw))
    finally:
        raw.close()


@cache
def _fields(model: type[models.Model]) -> tuple[models.Field, ...]:
    return tuple(model._meta.concrete_fields)


@cache
def select_list(model: type[models.Model], alias: str) -> str:
    """`alias.col, alias.col, ...` for every concrete field, in the order `from_row` reads."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(field.column)}" for field in _fields(model))


def width(model: type[models.Model]) -> int:
    """How many columns `select_list(model, ...)` selects."""
    return len(_fields(model))


@cache
def _readers(model: type[models.Model]) -> tuple[int, tuple[tuple, ...], list[str]]:
    """Where the primary key sits in a row, each field's converters (what the ORM applies after
    a SELECT: JSON decoding, for instance) and the attribute names: looked up once per model."""
    fields = _fields(model)
    return (
        fields.index(model._meta.pk),
        tuple(tuple(field.get_db_converters(connection)) for field in fields),
        [field.attname for field in fields],
    )


def from_row(model: type[models.Model], row: Sequence[Any], start: int = 0) -> models.Model | None:
    """The instance whose columns (as listed by `select_list`) start at `row[start]`, or None
    when its primary key is NULL (an outer join found nothing)."""
    pk_index, converters, attnames = _readers(model)
    values = row[start : start + len(attnames)]
    if values[pk_index] is None:
        return None
    converted = []
    for field, value, field_converters in zip(_fields(model), values, converters, strict=True):
        for converter in field_converters:
            value = converter(value, field, connection)
        converted.append(value)
    return model.from_db(connection.alias, attnames, converted)


@cache
def insert_columns(model: type[models.Model], skip: tuple[str, ...] = ()) -> str:
    """The quoted columns a new row of `model` is written with: every concrete field but the
    primary key (the database numbers rows) and the fields named in `skip`."""
    quote = connection.ops.quote_name
    return ", ".join(quote(field.column) for field in _insert_fields(model, skip))


@cache
def _insert_fields(model: type[models.Model], skip: tuple[str, ...]) -> tuple[models.Field, ...]:
    return tuple(
        field for field in _fields(model) if not field.primary_key and field.name not in skip
    )


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()  # full precision, unlike DjangoJSONEncoder
    return str(value)  # UUID, Decimal


def row_json(instance: models.Model, skip: tuple[str, ...] = ()) -> str:
    """A new instance as one JSON object `{column: value}` holding what `instance.save()`
    would INSERT (auto_now/auto_now_add are filled in on the instance), for
    `jsonb_populate_record(NULL::<table>, %s::jsonb)`: one parameter per row, so a statement
    writing several rows keeps a fixed text that the driver and the server can reuse."""
    return json.dumps(
        {
            field.column: field.pre_save(instance, add=True)
            for field in _insert_fields(type(instance), skip)
        },
        default=_json_value,
        ensure_ascii=False,
    )


def saved(instance: models.Model, pk: Any) -> models.Model:
    """Mark an instance written by hand-written SQL as saved, with its new primary key."""
    instance.pk = pk
    instance._state.adding = False
    instance._state.db = connection.alias
    return instance


def table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)
