"""Tenants and keys moved from the runtime app to tenancy in place: a database at the schema
before the move, with rows in it, comes out of `migrate` with every row, relation and admin
permission intact, under the new app's tables."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from runtime.models import GPUUnit, Operation
from tenancy.models import ApiKey, Tenant

BEFORE_THE_MOVE = [("runtime", "0004_drop_indexes_covered_by_composites"), ("tenancy", None)]


def _migrate(targets: list[tuple[str, str | None]]):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state([t for t in targets if t[1] is not None]).apps


def _tables() -> set[str]:
    return set(connection.introspection.table_names())


@pytest.mark.django_db(transaction=True)
def test_rows_survive_the_move_to_the_tenancy_app(django_user_model):
    old = _migrate(BEFORE_THE_MOVE)
    try:
        _check_the_move(old, django_user_model)
    finally:  # leave the database as every other test expects it, even after a failure
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def _check_the_move(old, django_user_model) -> None:
    assert {"runtime_tenant", "runtime_apikey", "runtime_tenant_users"} <= _tables()
    assert "tenancy_tenant" not in _tables()

    old_tenant = old.get_model("runtime", "Tenant").objects.create(
        slug="acme",
        namespace="acme-ns",
        quota_cpu=" 32 ",  # the old parser took surrounding spaces
        used_cpu_millicores=10_000,
        used_memory_bytes=42949672960,
        used_claims=1,
    )
    operator = django_user_model.objects.create(username="ops")
    old_tenant.users.add(operator.pk)
    old.get_model("runtime", "ApiKey").objects.create(
        tenant=old_tenant, name="ci", prefix="abc123", key_hash="f" * 64
    )
    unit = old.get_model("runtime", "GPUUnit").objects.create(
        tenant=old_tenant,
        name="one",
        namespace="acme-ns",
        operation_id="op-1",
        package_id="p",
        spec_name="p",
        cpu="10",
        memory="40Gi",
        cpu_millicores=10_000,
        memory_bytes=42949672960,
        gpu=1,
        device_class_name="gpu.nvidia.com",
        claim_name="unit-one-gpu",
        claim_request_name="gpu",
        count=1,
        image="busybox",
    )
    old.get_model("runtime", "Operation").objects.create(
        tenant=old_tenant, operation_id="op-1", kind="create", fingerprint="0" * 64, unit=unit
    )
    # auth and contenttypes are not part of the move: their current models are theirs then.
    tenant_type, _ = ContentType.objects.get_or_create(app_label="runtime", model="tenant")
    change_tenant = Permission.objects.get_or_create(
        content_type=tenant_type, codename="change_tenant", defaults={"name": "Can change tenant"}
    )[0]
    django_user_model.objects.get(pk=operator.pk).user_permissions.add(change_tenant)

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    assert {"tenancy_tenant", "tenancy_apikey", "tenancy_tenant_users"} <= _tables()
    assert not {"runtime_tenant", "runtime_apikey", "runtime_tenant_users"} & _tables()
    tenant = Tenant.objects.get(slug="acme")
    assert (tenant.pk, tenant.namespace, tenant.quota_cpu) == (old_tenant.pk, "acme-ns", "32")
    assert tenant.quota_cpu_millicores == 32_000
    assert (tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims) == (
        10_000,
        42949672960,
        1,
    )
    assert list(tenant.users.values_list("username", flat=True)) == ["ops"]
    assert ApiKey.objects.get(prefix="abc123").tenant == tenant
    assert GPUUnit.objects.get(name="one").tenant == tenant
    assert Operation.objects.get(operation_id="op-1").tenant == tenant
    # The admin permission granted before the move still grants the moved model.
    assert django_user_model.objects.get(username="ops").has_perm("tenancy.change_tenant")
    # New rows get fresh ids from the sequences the tables kept.
    assert Tenant.objects.create(slug="next", namespace="next-ns").pk > tenant.pk
    # The pattern indexes Django drops by name carry the names it would give them now.
    with connection.schema_editor() as editor:
        expected = {
            editor._create_index_name(table, [column], suffix="_like")
            for table, column in (
                ("tenancy_tenant", "slug"),
                ("tenancy_tenant", "namespace"),
                ("tenancy_apikey", "prefix"),
            )
        }
    with connection.cursor() as cursor:
        found = {
            name
            for table in ("tenancy_tenant", "tenancy_apikey")
            for name in connection.introspection.get_constraints(cursor, table)
            if name.endswith("_like")
        }
    assert found == expected
