"""`manage.py create_tenant SLUG --namespace NS [--cpu --memory --claims --storage --storages]
[--devices CLASS=N ...] [--operator]`."""

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenancy import selectors, services


class Command(BaseCommand):
    help = "Create a tenant (idempotent with --if-missing) with its namespace and quota."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--namespace", help="Kubernetes namespace (default: the slug)")
        parser.add_argument("--display-name", default="")
        parser.add_argument("--cpu", default="160", help="CPU quota (quantity)")
        parser.add_argument("--memory", default="256Gi", help="memory quota (quantity)")
        parser.add_argument("--claims", type=int, default=64, help="ResourceClaim quota")
        parser.add_argument("--storage", default="1Ti", help="storage quota (total size)")
        parser.add_argument("--storages", type=int, default=16, help="storage count quota")
        parser.add_argument(
            "--devices",
            action="append",
            default=[],
            metavar="CLASS=N",
            help="device quota for a DeviceClass, e.g. nvidia-h100=8 (repeatable)",
        )
        parser.add_argument("--operator", action="store_true", help="may read the inventory")
        parser.add_argument(
            "--if-missing", action="store_true", help="succeed quietly if the slug exists"
        )

    def handle(self, *args: Any, slug: str, **options: Any) -> None:
        if options["if_missing"] and selectors.get_tenant(slug=slug) is not None:
            self.stdout.write(f"tenant {slug} exists")
            return
        devices = {}
        for item in options["devices"]:
            name, _, count = item.partition("=")
            if not count.isdigit():
                raise CommandError(f"--devices {item}: expected CLASS=N, e.g. nvidia-h100=8")
            devices[name] = int(count)
        try:
            tenant = services.create_tenant(
                slug=slug,
                namespace=options["namespace"] or slug,
                display_name=options["display_name"],
                quota_cpu=options["cpu"],
                quota_memory=options["memory"],
                quota_claims=options["claims"],
                quota_storage=options["storage"],
                quota_storages=options["storages"],
                quota_devices=devices,
                is_operator=options["operator"],
            )
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items())
            ) from exc
        self.stdout.write(f"created tenant {tenant.slug} in namespace {tenant.namespace}")
