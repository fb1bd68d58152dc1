"""`manage.py unlock_account USERNAME`: lift the lock `lock_account USERNAME` set."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.errors import NotFound
from tenancy import login


class Command(BaseCommand):
    help = "Lift an operator's lock of an account (lock_account)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        try:
            login.unlock_account(username=username)
        except NotFound as error:
            raise CommandError(error.message) from error
        self.stdout.write(f"account {username!r} unlocked")
