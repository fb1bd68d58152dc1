"""`manage.py audit_usage --from --to`: compare the ledger with what the units' timelines say
their pods held (runtime/usage_audit.py), each pod the clusters say holds devices now with its
meter, and the rollups with the ledger (billing.rollups); prints each difference (over a
second, for the first two), exits 1 if there is any."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from billing import periods as billing_periods
from billing import rollups
from controlplane.kube.errors import KubeError
from runtime import usage_audit
from runtime.control import metering
from runtime.models import GPUUnit, UnitPhase


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"{text!r} is not a date or an ISO 8601 time") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Compare what the ledger bills each unit with what its timeline says its pods held "
        "(times the cluster reported), from --from to --to (default: the last 24 hours), and "
        "the rollups of those months with the ledger."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="start", type=_moment, help="start (ISO 8601)")
        parser.add_argument("--to", dest="end", type=_moment, help="end (ISO 8601)")

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        end = options["end"] or now
        start = options["start"] or end - timedelta(days=1)
        if start >= end:
            raise CommandError("--to must be after --from")
        differences = usage_audit.audit(start, end, now=now)
        for difference in differences:
            self.stdout.write(str(difference))
        self.stdout.write(
            f"{len(differences)} difference(s) over a second from {start.isoformat()} "
            f"to {end.isoformat()}"
        )
        pods: list[usage_audit.PodDifference] = []
        clusters = sorted(
            set(
                GPUUnit.objects.exclude(phase__in=UnitPhase.ENDING).values_list(
                    "cluster", flat=True
                )
            )
        )
        for cluster in clusters:
            try:
                pods += usage_audit.audit_pods(metering.held_in_cluster(cluster))
            except KubeError as exc:
                self.stdout.write(f"cluster {cluster} not checked: {exc.message}")
        for pod in pods:
            self.stdout.write(str(pod))
        self.stdout.write(
            f"{len(pods)} pod(s) holding devices billed otherwise, in {len(clusters)} cluster(s)"
        )
        wrong = rollups.differences(
            months=(billing_periods.month_start(start), billing_periods.next_month(end))
        )
        for rollup in wrong:
            self.stdout.write(
                f"{rollup.model} {rollup.key}: holds {rollup.stored}, the ledger sums to "
                f"{rollup.expected}"
            )
        self.stdout.write(f"{len(wrong)} rollup(s) differ from the ledger")
        if differences or pods:
            raise CommandError("the ledger differs from what the units held", returncode=1)
        if wrong:
            raise CommandError("the rollups differ from the ledger", returncode=1)
