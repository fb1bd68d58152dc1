"""`manage.py import_catalog FILE [--dry-run] [--prune]`: apply a packages YAML file."""

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.models import Package
from catalog.services import CatalogImportError, import_catalog


class Command(BaseCommand):
    help = "Import the package catalog from the article's `packages:` YAML, all or nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "file", help="YAML file with a top-level `packages:` list ('-' = stdin)"
        )
        parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
        parser.add_argument(
            "--prune", action="store_true", help="deactivate packages that are not in the file"
        )
        parser.add_argument(
            "--if-empty", action="store_true", help="only import when the catalog has no packages"
        )

    def handle(
        self, *args: Any, file: str, dry_run: bool, prune: bool, if_empty: bool, **options: Any
    ) -> None:
        if if_empty and Package.objects.exists():
            self.stdout.write("catalog already has packages; sample not imported")
            return
        if file == "-":
            text = sys.stdin.read()
        else:
            path = Path(file)
            if not path.is_file():
                raise CommandError(f"{file}: no such file")
            text = path.read_text(encoding="utf-8")
        try:
            plan = import_catalog(text=text, prune=prune, dry_run=dry_run)
        except CatalogImportError as exc:
            raise CommandError(
                "catalog not imported, nothing changed:\n  " + "\n  ".join(exc.problems)
            ) from exc
        for line in plan.lines():
            self.stdout.write(line)
        suffix = " (dry run: nothing written)" if dry_run else ""
        self.stdout.write(self.style.SUCCESS(plan.summary() + suffix))
