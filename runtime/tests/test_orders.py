"""runtime/orders.py: what its hand-written statements write and read are the rows the ORM
would have written and read; they are prepared once per connection; new rows pass
clean_fields(); and the system check refuses model features the statements cannot carry."""

from __future__ import annotations

import pytest
from django.db import connection, models
from django.db.models.signals import post_save

from catalog.models import Package
from catalog.tests.factories import PackageFactory
from controlplane import statements
from runtime import manifests, orders
from runtime.errors import InvalidRequest
from runtime.models import GPUUnit, Operation, UnitEvent
from tenancy.models import Tenant
from tenancy.tests.factories import TenantFactory
from tests.endpoints import recording

pytestmark = pytest.mark.django_db


@pytest.fixture
def package():
    # Values that make a round trip interesting: a fractional cpu, a CEL selector, a grace
    # other than the default.
    return PackageFactory(
        cpu="500m",
        selectors=["device.attributes['gpu.nvidia.com'].productName == 'x'"],
        capacity={"memory": "20Gi"},
        termination_grace_seconds=600,
    )


def _order(tenant: Tenant, package) -> orders.CreateResult:
    return orders.create_unit(
        tenant=tenant,
        operation_id="op-1",
        name="one",
        package_id=package.id,
        image="python:3.12",
        template={"env": [{"name": "ü", "value": "☃"}]},  # JSON with non-ASCII text
    )


def test_the_rows_an_order_writes_read_back_equal_through_the_orm(package):
    tenant = TenantFactory()
    unit = _order(tenant, package).unit
    # The package was read by hand-written SQL: its JSON fields arrived decoded.
    assert (unit.selectors, unit.capacity) == (package.selectors, {"memory": "20Gi"})
    assert unit.termination_grace_seconds == 600
    stored = GPUUnit.objects.get(pk=unit.pk)
    for field in GPUUnit._meta.concrete_fields:
        assert getattr(stored, field.attname) == getattr(unit, field.attname), field.name
    # auto_now_add was filled in on the instance, to the microsecond, as save() would.
    assert stored.created_at.microsecond == unit.created_at.microsecond
    assert stored.template == {"env": [{"name": "ü", "value": "☃"}]}
    assert unit._state.adding is False
    operation = Operation.objects.get(unit=unit)
    assert (operation.operation_id, operation.kind, operation.status) == (
        "op-1",
        "create",
        "pending",
    )
    assert [(e.reason, e.count) for e in UnitEvent.objects.filter(unit=unit)] == [("Accepted", 1)]
    tenant.refresh_from_db()
    assert (tenant.used_cpu_millicores, tenant.used_claims) == (500, 1)


def test_a_unit_keeps_the_termination_grace_its_package_had_when_it_was_ordered(package):
    unit = _order(TenantFactory(), package).unit
    Package.objects.filter(pk=package.pk).update(termination_grace_seconds=5)
    unit.refresh_from_db()
    assert unit.termination_grace_seconds == 600
    pod = manifests.build_pod(unit.contract(request_hash=""), owner_uid="uid")
    assert pod["spec"]["terminationGracePeriodSeconds"] == 600


def test_a_replayed_order_reads_the_operation_back_as_a_model(package):
    tenant = TenantFactory()
    first = _order(tenant, package)
    again = _order(tenant, package)
    assert (first.created, again.created) == (True, False)
    assert again.unit == GPUUnit.objects.get()


def test_an_order_whose_fields_do_not_validate_is_refused_and_writes_nothing():
    tenant = TenantFactory()
    package = PackageFactory()
    with pytest.raises(InvalidRequest) as refused:
        orders.create_unit(
            tenant=tenant,
            operation_id="op-1",
            name="x" * 60,  # the API refuses it first; the order does not rely on that
            package_id=package.id,
            image="busybox",
        )
    assert "name" in refused.value.details["fields"]
    assert not GPUUnit.objects.exists()
    assert not Operation.objects.exists()


def _prepared(fragment: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{fragment}%"],
        )
        return cursor.fetchone()[0]


def test_its_statements_are_prepared_on_the_server_once_per_connection():
    for _ in range(3):
        with statements.cursor() as cursor:
            cursor.execute("SELECT %s::int + 41 AS prepared_probe", [1])
            assert cursor.fetchone() == (42,)
    assert _prepared("prepared_probe") == 1
    with connection.cursor() as cursor:  # Django's own cursors bind on the client
        cursor.execute("SELECT %s::int + 41 AS client_probe", [1])
    assert _prepared("client_probe") == 0


def test_prepared_statements_can_be_turned_off(settings):
    settings.DB_PREPARED_STATEMENTS = False
    with statements.cursor() as cursor:
        cursor.execute("SELECT %s::int + 41 AS unprepared_probe", [1])
        assert cursor.fetchone() == (42,)
    assert _prepared("unprepared_probe") == 0


def test_statement_logs_see_the_prepared_cursor():
    with recording() as log, statements.cursor() as cursor:
        cursor.execute("SELECT 1 AS seen_probe")
    assert log.statements == ["SELECT 1 AS seen_probe"]
    assert _prepared("seen_probe") == 1  # recorded on the production (prepared) path


class TestSystemCheck:
    def test_the_order_models_pass(self):
        assert orders.check_order_models() == []

    @pytest.fixture
    def added_field(self):
        """Add a field to GPUUnit for the length of a test."""
        added = []

        def add(field: models.Field, name: str = "extra") -> None:
            field.contribute_to_class(GPUUnit, name)
            added.append((field, name))

        yield add
        for field, name in added:
            GPUUnit._meta.local_fields.remove(field)
            delattr(GPUUnit, name)
            GPUUnit._meta._expire_cache()

    def test_a_db_default_on_gpuunit_is_refused(self, added_field):
        added_field(models.IntegerField(db_default=0))
        errors = orders.check_order_models()
        assert [error.id for error in errors] == ["runtime.E002"]
        assert "runtime.GPUUnit.extra has a db_default" in errors[0].msg

    def test_a_generated_field_on_gpuunit_is_refused(self, added_field):
        added_field(
            models.GeneratedField(
                expression=models.F("gpu") * 2, output_field=models.IntegerField(), db_persist=True
            )
        )
        assert [error.id for error in orders.check_order_models()] == ["runtime.E001"]

    def test_a_post_save_receiver_on_an_order_model_is_refused(self):
        def receiver(**kwargs):
            pass

        post_save.connect(receiver, sender=Operation)
        try:
            errors = orders.check_order_models()
        finally:
            post_save.disconnect(receiver, sender=Operation)
        assert [error.id for error in errors] == ["runtime.E003"]
        assert "runtime.Operation has post_save receivers" in errors[0].msg

    def test_manage_py_check_runs_it(self, added_field):
        from django.core.management import call_command
        from django.core.management.base import SystemCheckError

        added_field(models.IntegerField(db_default=0))
        with pytest.raises(SystemCheckError, match=r"runtime\.E002"):
            call_command("check")
