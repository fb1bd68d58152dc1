"""Hand-written statements that still speak in models, for the few paths where the ORM's
query building costs as much as the database work (docs/benchmarks.md): the order
(runtime/orders.py) and the API key lookup every request makes (tenancy/keys.py). Column lists
come from the models' field metadata, rows come back as model instances, new rows are written
as `Model.save()` would INSERT them; the statements run prepared on the server."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from datetime import date, datetime
from functools import cache
from typing import Any, TypeVar

import psycopg
from django.conf import settings
from django.db import connection, models
from django.db.backends.utils import CursorWrapper

M = TypeVar("M", bound=models.Model)


class _Preparing:
    """A psycopg cursor (server-side binding) that prepares each statement it runs: the server
    parses and plans it once per connection, then only binds and executes it."""

    def __init__(self, raw: psycopg.Cursor) -> None:
        self._cursor = raw

    def execute(self, query: str, params: Any = None) -> psycopg.Cursor:
        return self._cursor.execute(query, params, prepare=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


@contextlib.contextmanager
def cursor() -> Iterator[CursorWrapper]:
    """The cursor of these statements: prepared ones (about half their database CPU, measured
    in docs/benchmarks.md) unless settings.DB_PREPARED_STATEMENTS is off or Django logs
    queries (DEBUG: its log shows the SQL of its own cursors only). Wrapped like any Django
    cursor, so execute_wrapper (which the statement-count tests use) and the translation of
    database errors (IntegrityError, ...) apply."""
    if not settings.DB_PREPARED_STATEMENTS or connection.queries_logged:
        with connection.cursor() as plain:
            yield plain
        return
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = psycopg.Cursor(connection.connection)
    try:
        # make_cursor wraps any DB-API cursor; _Preparing is one that prepares what it runs.
        yield connection.make_cursor(_Preparing(raw))  # type: ignore[arg-type]
    finally:
        raw.close()


@cache
def fields(model: type[models.Model]) -> tuple[models.Field, ...]:
    return tuple(model._meta.concrete_fields)


def table(model: type[models.Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def column(field: models.Field) -> str:
    assert field.column is not None  # concrete fields have one
    return connection.ops.quote_name(field.column)


@cache
def select_list(model: type[models.Model], alias: str) -> str:
    """`alias.col, alias.col, ...` for every concrete field, in the order `from_row` reads."""
    return ", ".join(f"{alias}.{column(field)}" for field in fields(model))


def width(model: type[models.Model]) -> int:
    return len(fields(model))


@cache
def _readers(model: type[models.Model]) -> tuple[int, tuple[tuple, ...], list[str]]:
    """Where the primary key sits in a row, each field's converters (what the ORM applies after
    a SELECT: JSON decoding, for instance) and the attribute names: looked up once per model."""
    concrete = fields(model)
    return (
        concrete.index(model._meta.pk),
        tuple(tuple(field.get_db_converters(connection)) for field in concrete),
        [field.attname for field in concrete],
    )


def from_row(model: type[M], row: Sequence[Any], start: int = 0) -> M | None:
    """The instance whose columns (as `select_list` lists them) start at `row[start]`, or None
    when its primary key is NULL (an outer join found nothing)."""
    pk_index, converters, attnames = _readers(model)
    values = row[start : start + len(attnames)]
    if values[pk_index] is None:
        return None
    converted = []
    for field, value, field_converters in zip(fields(model), values, converters, strict=True):
        for converter in field_converters:
            value = converter(value, field, connection)
        converted.append(value)
    return model.from_db(connection.alias, attnames, converted)


@cache
def _insertfields(model: type[models.Model], skip: tuple[str, ...]) -> tuple[models.Field, ...]:
    return tuple(
        field for field in fields(model) if not field.primary_key and field.name not in skip
    )


@cache
def insert_columns(model: type[models.Model], skip: tuple[str, ...] = ()) -> str:
    """The quoted columns a new row is written with: every concrete field but the primary key
    (the database numbers rows) and the fields named in `skip`."""
    return ", ".join(column(field) for field in _insertfields(model, skip))


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()  # full precision, unlike DjangoJSONEncoder
    return str(value)  # UUID, Decimal


def row_json(instance: models.Model, skip: tuple[str, ...] = ()) -> str:
    """A new instance as one JSON object `{column: value}` holding what `instance.save()`
    would INSERT (auto_now/auto_now_add are filled in on the instance), for
    `jsonb_populate_record(NULL::<table>, %s::jsonb)`."""
    return json.dumps(
        {
            field.column: field.pre_save(instance, add=True)
            for field in _insertfields(type(instance), skip)
        },
        default=_json_value,
        ensure_ascii=False,
    )


def saved(instance: M, pk: Any) -> M:
    """Mark an instance written by these statements as saved, with its new primary key."""
    instance.pk = pk
    instance._state.adding = False
    instance._state.db = connection.alias
    return instance
