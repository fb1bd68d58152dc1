"""`manage.py ensure_tenant_user --username demo --tenant default`: a dashboard login for a
tenant, created once with a printed password (or DEMO_PASSWORD)."""

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenancy import selectors, services


class Command(BaseCommand):
    help = "Create a dashboard user acting for a tenant if missing; print its password once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", required=True)
        parser.add_argument("--tenant", required=True, help="tenant slug")

    def handle(self, *args: Any, username: str, tenant: str, **options: Any) -> None:
        found = selectors.get_tenant(slug=tenant)
        if found is None:
            raise CommandError(f"no tenant {tenant!r}")
        given = os.environ.get("DEMO_PASSWORD", "")
        _user, password = services.ensure_tenant_user(
            tenant=found, username=username, password=given
        )
        if password is None:
            self.stdout.write(f"dashboard user {username!r} exists")
        else:
            shown = "from DEMO_PASSWORD" if given else password
            self.stdout.write(
                f"created dashboard user {username!r} for tenant {tenant}, password: {shown}"
            )
