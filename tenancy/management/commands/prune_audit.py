"""`manage.py prune_audit [--keep-months N] [--as NAME]`: drop the audit log's months older
than its retention, whole (their partitions), and record that in the log. The one way rows
ever leave it: a row's DELETE is refused by the database."""

import getpass
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from tenancy import audit_partitions


class Command(BaseCommand):
    help = "Drop the audit log's months older than the retention (AUDIT_RETENTION_MONTHS)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--keep-months",
            type=int,
            default=settings.AUDIT_RETENTION_MONTHS,
            help="whole months kept before this one (default: AUDIT_RETENTION_MONTHS)",
        )
        parser.add_argument(
            "--as", dest="actor", default="", help="who prunes, for the log (default: you)"
        )

    def handle(self, *args: Any, keep_months: int, actor: str, **options: Any) -> None:
        if keep_months < 1:
            raise CommandError("--keep-months is at least 1: this month is never dropped.")
        cutoff = audit_partitions.month_start(timezone.now())
        for _ in range(keep_months):
            cutoff = audit_partitions.previous_month(cutoff)
        dropped = audit_partitions.drop_before(cutoff, actor=actor or getpass.getuser())
        if not dropped:
            self.stdout.write(f"nothing before {cutoff:%Y-%m} to drop")
            return
        self.stdout.write(
            f"dropped {len(dropped)} month(s) before {cutoff:%Y-%m}: " + ", ".join(dropped)
        )
