"""The audit log's monthly partitions (migration 0015): one table per UTC month of
`occurred_at`, made two months ahead by beat (`ensure`), and dropped whole when ops prune the
log past its retention (`drop_before`, from `manage.py prune_audit`): the one way rows ever
leave the log, recorded in the log itself. The statements here are what neither the ORM nor
Django's schema editor can say: a partition made or dropped (DDL), and the list of partitions
(PostgreSQL's catalog: Django's introspection leaves partitions out of its table names). They
stay in this module; none is on a path a request waits on."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime

from django.db import DatabaseError, connection, transaction

from tenancy.models import AuditActorKind, AuditEvent, AuditOutcome, AuditSource

logger = logging.getLogger(__name__)

PARENT = "tenancy_auditevent"
DEFAULT = f"{PARENT}_default"


def month_start(moment: datetime | date) -> date:
    return date(moment.year, moment.month, 1)


def next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def previous_month(month: date) -> date:
    return date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)


def partition_name(month: date) -> str:
    return f"{PARENT}_{month:%Y_%m}"


@dataclass(frozen=True)
class Partition:
    name: str
    month: date  # its first day: it holds [month, next_month(month))


def partitions() -> list[Partition]:
    """The monthly partitions, oldest first (the DEFAULT one left out). One statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT child.relname FROM pg_inherits i "
            "JOIN pg_class child ON child.oid = i.inhrelid "
            "JOIN pg_class parent ON parent.oid = i.inhparent "
            "WHERE parent.relname = %s",
            [PARENT],
        )
        names = [row[0] for row in cursor.fetchall()]
    found = []
    for name in names:
        suffix = name.removeprefix(f"{PARENT}_")
        try:
            month = datetime.strptime(suffix, "%Y_%m").date()
        except ValueError:
            continue  # the DEFAULT partition
        found.append(Partition(name, month))
    return sorted(found, key=lambda p: p.month)


def ensure(*, now: datetime, ahead: int = 2) -> list[str]:
    """Make the partitions of this month and the next `ahead` (beat, daily); returns those
    made. A month whose rows already fell into the DEFAULT partition (beat away that long)
    cannot get one: it is logged, and its rows stay there."""
    have = {p.month for p in partitions()}
    made = []
    month = month_start(now)
    for _ in range(ahead + 1):
        if month not in have:
            try:
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute(
                        f'CREATE TABLE "{partition_name(month)}" PARTITION OF "{PARENT}" '
                        "FOR VALUES FROM (%s) TO (%s)",
                        [_utc(month), _utc(next_month(month))],
                    )
                made.append(partition_name(month))
            except DatabaseError:
                logger.warning(
                    "no partition for %s: its rows are in %s already", month, DEFAULT, exc_info=True
                )
        month = next_month(month)
    return made


def drop_before(cutoff: date, *, actor: str) -> list[str]:
    """Drop every monthly partition wholly before `cutoff` (a month's first day), and record
    that in the log (action `audit.partitions_drop`, naming them). Returns their names."""
    gone = [p for p in partitions() if next_month(p.month) <= month_start(cutoff)]
    if not gone:
        return []
    names = [p.name for p in gone]
    with transaction.atomic():
        with connection.cursor() as cursor:
            for name in names:
                cursor.execute(f'DROP TABLE "{name}"')
        AuditEvent.objects.create(
            source=AuditSource.COMMAND,
            actor_kind=AuditActorKind.USER,
            actor=actor[:150],
            action="audit.partitions_drop",
            target_kind="tenancy.auditevent",
            target_name=",".join(names)[:255],
            method="",
            path="manage.py prune_audit",
            status=0,
            outcome=AuditOutcome.SUCCESS,
        )
    logger.warning("audit log partitions dropped by %s: %s", actor, ", ".join(names))
    return names


def _utc(month: date) -> datetime:
    return datetime(month.year, month.month, 1, tzinfo=UTC)
