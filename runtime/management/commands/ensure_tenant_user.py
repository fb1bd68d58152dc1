"""`manage.py ensure_tenant_user --username demo --tenant default`: a dashboard login for a
tenant, created once with a printed password (or DEMO_PASSWORD)."""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from runtime.models import Tenant


class Command(BaseCommand):
    help = "Create a dashboard user acting for a tenant if missing; print its password once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", required=True)
        parser.add_argument("--tenant", required=True, help="tenant slug")

    def handle(self, *args, username: str, tenant: str, **options) -> None:
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"no tenant {tenant!r}")
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        given = os.environ.get("DEMO_PASSWORD", "")
        if user is None:
            password = given or secrets.token_urlsafe(12)
            user = user_model.objects.create_user(username=username, password=password)
            shown = "from DEMO_PASSWORD" if given else password
            self.stdout.write(
                f"created dashboard user {username!r} for tenant {tenant}, password: {shown}"
            )
        else:
            self.stdout.write(f"dashboard user {username!r} exists")
        found.users.add(user)
