"""`manage.py create_api_key --tenant SLUG [--name TEXT]`: prints the new key on its last line."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenancy import selectors, services


class Command(BaseCommand):
    help = "Create an API key for a tenant. The key is printed once, on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--name", default="", help="what the key is for")

    def handle(self, *args: Any, tenant: str, name: str, **options: Any) -> None:
        found = selectors.get_tenant(slug=tenant)
        if found is None:
            raise CommandError(f"no tenant {tenant!r}")
        api_key, key = services.create_api_key(tenant=found, name=name)
        self.stderr.write(f"API key {api_key.prefix} for tenant {found.slug} (shown only once):")
        self.stdout.write(key)
