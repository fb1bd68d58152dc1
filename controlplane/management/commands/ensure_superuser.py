"""`manage.py ensure_superuser --username admin`: create the admin once, printing its password.

The password comes from ADMIN_PASSWORD when set (and is then reset to it on every run);
otherwise a random one is generated and printed only when the user is created.
"""

import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Create a superuser if missing; print a generated password once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--email", default="admin@localhost")

    def handle(self, *args: Any, username: str, email: str, **options: Any) -> None:
        user_model = get_user_model()
        given = os.environ.get("ADMIN_PASSWORD", "")
        user = user_model.objects.filter(username=username).first()
        if user is None:
            password = given or secrets.token_urlsafe(12)
            user_model.objects.create_superuser(username=username, email=email, password=password)
            shown = "from ADMIN_PASSWORD" if given else password
            self.stdout.write(f"created superuser {username!r}, password: {shown}")
        elif given:
            user.set_password(given)
            user.save(update_fields=["password"])
            self.stdout.write(f"superuser {username!r}: password set from ADMIN_PASSWORD")
        else:
            self.stdout.write(
                f"superuser {username!r} exists (password printed when it was created; "
                "set ADMIN_PASSWORD to reset it)"
            )
