"""controlplane.sql: rows written and read by hand-written SQL are the rows the ORM would have
written and read."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection

from controlplane import sql
from runtime.models import GPUUnit, Operation, UnitEvent
from runtime.tests.factories import TenantFactory, UnitFactory

pytestmark = pytest.mark.django_db


def _unit(tenant, name: str = "one") -> GPUUnit:
    # Values that make a round trip interesting: JSON with non-ASCII text, a fractional cpu.
    return UnitFactory(
        tenant,
        name,
        cpu="500m",
        cpu_millicores=500,
        selectors=["device.attributes['gpu.nvidia.com'].productName == 'x'"],
        capacity={"memory": "80Gi"},
        template={"env": [{"name": "ü", "value": "☃"}]},
    )


def _insert(instance, skip: tuple[str, ...] = (), extra: str = "", extra_value=None) -> int:
    table = sql.table(type(instance))
    columns = sql.insert_columns(type(instance), skip)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}{extra}) "
            f"SELECT {columns}{', %(extra)s' if extra else ''} "
            f"FROM jsonb_populate_record(NULL::{table}, %(row)s::jsonb) RETURNING id",
            {"row": sql.row_json(instance, skip), "extra": extra_value},
        )
        return cursor.fetchone()[0]


def test_a_row_written_from_json_reads_back_equal_through_the_orm():
    unit = _unit(TenantFactory())
    sql.saved(unit, _insert(unit))
    stored = GPUUnit.objects.get(pk=unit.pk)
    for field in GPUUnit._meta.concrete_fields:
        assert getattr(stored, field.attname) == getattr(unit, field.attname), field.name
    # auto_now_add was filled in on the instance, to the microsecond, as save() would.
    assert stored.created_at.microsecond == unit.created_at.microsecond
    assert unit._state.adding is False


def test_skipped_fields_are_left_to_the_statement():
    tenant = TenantFactory()
    unit = _unit(tenant)
    sql.saved(unit, _insert(unit))
    operation = Operation(tenant=tenant, operation_id="op", kind="create", fingerprint="f" * 64)
    assert "unit_id" not in sql.insert_columns(Operation, ("unit",))
    pk = _insert(operation, ("unit",), ", unit_id", unit.pk)
    assert Operation.objects.get(pk=pk).unit_id == unit.pk


def test_from_row_builds_instances_and_none_for_an_outer_join_miss():
    tenant = TenantFactory()
    unit = _unit(tenant)
    sql.saved(unit, _insert(unit))
    UnitEvent.objects.create(
        unit=unit, reason="Accepted", last_seen=datetime(2026, 1, 1, tzinfo=UTC)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {sql.select_list(GPUUnit, 'u')}, {sql.select_list(UnitEvent, 'e')} "
            "FROM runtime_gpuunit u LEFT JOIN runtime_unitevent e "
            "ON e.unit_id = u.id AND e.reason = 'absent' WHERE u.id = %s",
            [unit.pk],
        )
        row = cursor.fetchone()
    read = sql.from_row(GPUUnit, row)
    assert isinstance(read, GPUUnit)
    assert read.template == {"env": [{"name": "ü", "value": "☃"}]}  # JSON decoded
    assert read.selectors == unit.selectors
    assert read.uid == unit.uid
    assert sql.from_row(UnitEvent, row, sql.width(GPUUnit)) is None


def _prepared(fragment: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{fragment}%"],
        )
        return cursor.fetchone()[0]


def test_hot_statements_are_prepared_on_the_server_once_per_connection():
    for _ in range(3):
        with sql.cursor() as cursor:
            cursor.execute("SELECT %s::int + 41 AS prepared_probe", [1])
            assert cursor.fetchone() == (42,)
    assert _prepared("prepared_probe") == 1
    with connection.cursor() as cursor:  # Django's own cursors bind on the client
        cursor.execute("SELECT %s::int + 41 AS client_probe", [1])
    assert _prepared("client_probe") == 0


def test_prepared_statements_can_be_turned_off(settings):
    settings.DB_PREPARED_STATEMENTS = False
    with sql.cursor() as cursor:
        cursor.execute("SELECT %s::int + 41 AS unprepared_probe", [1])
        assert cursor.fetchone() == (42,)
    assert _prepared("unprepared_probe") == 0
