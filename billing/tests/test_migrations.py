"""The package rollups gained a region: a ledger written before comes out of `migrate` with
its package rollups rebuilt apart by region, every sum the ledger's."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from billing.models import PackageRollup, UnitRollup
from tenancy.tests.factories import TenantFactory

BEFORE = [("billing", "0007_usage_region")]
T = datetime(2026, 11, 28, 10, 0, tzinfo=UTC)


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_package_rollups_are_rebuilt_apart_by_region():
    tenant = TenantFactory()
    old = _migrate(BEFORE)
    try:
        record = old.get_model("billing", "UsageRecord")
        for name, region, hours in (("east", "us-east", 2), ("west", "eu-west", 1)):
            record.objects.create(
                id=uuid.uuid4(),
                tenant_id=tenant.pk,
                unit_uid=uuid.uuid4(),
                unit_name=name,
                region=region,
                package_id="h100-2x",
                start=T,
                end=T + timedelta(hours=hours),
                seconds=Decimal(3600 * hours),
                quantity=Decimal(7200 * hours),
                quantity_unit="device-seconds",
                hourly=Decimal("3.6000"),
                currency="USD",
                cost=Decimal("3.6") * hours,
            )
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    finally:  # leave the database as every other test expects it, even after a failure
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    days = PackageRollup.objects.filter(grain="day", period=date(2026, 11, 28))
    assert sorted(days.values_list("region", "records", "cost")) == [
        ("eu-west", 1, Decimal("3.600000")),
        ("us-east", 1, Decimal("7.200000")),
    ]
    assert PackageRollup.objects.filter(grain="month").count() == 2
    assert UnitRollup.objects.count() == 4  # two units, a day and a month each
