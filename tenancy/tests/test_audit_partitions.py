"""The audit log is partitioned by month (issue 41, item 5): rows land in their month's
partition, beat keeps two months ahead, and pruning drops whole old months, recorded in the
log itself; a row's DELETE is still refused."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from tenancy import audit_partitions
from tenancy.models import AuditEvent
from tenancy.tests.test_audit import event

pytestmark = pytest.mark.django_db(transaction=True)


def _partition_of(row: AuditEvent) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM tenancy_auditevent WHERE id = %s", [row.pk]
        )
        return cursor.fetchone()[0]


def test_rows_land_in_their_month_and_two_months_ahead_exist(tenant):
    now = timezone.now()
    this_month = audit_partitions.month_start(now)
    months = {p.month for p in audit_partitions.partitions()}
    ahead = audit_partitions.next_month(audit_partitions.next_month(this_month))
    assert {this_month, ahead} <= months
    row = event(tenant, occurred_at=now)
    assert _partition_of(row) == audit_partitions.partition_name(this_month)
    assert audit_partitions.ensure(now=now) == []  # nothing more to make


def test_prune_drops_whole_old_months_and_says_so_in_the_log(tenant, capsys):
    old_month = date(2020, 1, 1)
    audit_partitions.ensure(now=datetime(2020, 1, 15, tzinfo=UTC), ahead=0)
    old = event(tenant, occurred_at=datetime(2020, 1, 20, tzinfo=UTC), request_id="old")
    recent = event(tenant, occurred_at=timezone.now(), request_id="recent")
    assert _partition_of(old) == audit_partitions.partition_name(old_month)
    # A row is never deleted on its own, whoever asks.
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM tenancy_auditevent WHERE id = %s", [old.pk])

    call_command("prune_audit", "--keep-months", "12", "--as", "ops-alice")

    assert "tenancy_auditevent_2020_01" in capsys.readouterr().out
    assert not AuditEvent.objects.filter(request_id="old").exists()
    assert AuditEvent.objects.filter(request_id="recent").exists()
    assert old_month not in {p.month for p in audit_partitions.partitions()}
    recorded = AuditEvent.objects.get(action="audit.partitions_drop")
    assert (recorded.source, recorded.actor, recorded.target_name) == (
        "command",
        "ops-alice",
        "tenancy_auditevent_2020_01",
    )
    assert recent.pk != recorded.pk
    # Nothing left to drop: said so, nothing recorded.
    call_command("prune_audit", "--keep-months", "12")
    assert "nothing before" in capsys.readouterr().out
    assert AuditEvent.objects.filter(action="audit.partitions_drop").count() == 1
