"""`manage.py export_catalog [-o FILE]`: write the catalog as the article's packages YAML."""

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from catalog.services import export_catalog


class Command(BaseCommand):
    help = "Export the package catalog as `packages:` YAML (inactive packages carry active: false)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-o", "--output", help="write to this file instead of stdout")

    def handle(self, *args: Any, output: str | None, **options: Any) -> None:
        text = export_catalog()
        if output:
            Path(output).write_text(text, encoding="utf-8")
        else:
            self.stdout.write(text, ending="")
