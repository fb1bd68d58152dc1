"""`manage.py lock_account USERNAME`: refuse an account's logins at every address (and end its
sessions) until `unlock_account USERNAME`; the throttle only ever locks one address."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.errors import NotFound
from tenancy import login


class Command(BaseCommand):
    help = "Lock a dashboard and admin account at every address, until unlock_account."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        try:
            login.lock_account(username=username)
        except NotFound as error:
            raise CommandError(error.message) from error
        self.stdout.write(
            f"account {username!r} locked: its logins are refused from every address and its "
            f"sessions ended (unlock_account {username} lifts it)"
        )
