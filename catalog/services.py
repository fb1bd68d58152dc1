"""Catalog writes: YAML import (planned, then applied all-or-nothing) and export."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet

from catalog import yaml_io
from catalog.models import FIELD_PATHS, Package
from dracel.quantity import same_value

_QUANTITY_FIELDS = {"cpu", "memory", "ephemeral_storage"}
_COMPARED_FIELDS = [
    "spec_name",
    "cpu",
    "memory",
    "gpu",
    "device_class_name",
    "claim_request_name",
    "count",
    "selectors",
    "capacity",
    "match_attribute",
    "alternatives",
    "max_stop_after",
    "ephemeral_storage",
    "termination_grace_seconds",
    "regions",
    "price",
    "alternative_prices",
    "interruptible",
    "interruptible_price",
    "preemption_notice_seconds",
    "active",
]


class CatalogImportError(Exception):
    """The file cannot be imported; `problems` name the entry index and field of each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class Change:
    package_id: str
    fields: dict[str, tuple[object, object]]  # YAML path -> (old, new)


@dataclass
class ImportPlan:
    added: list[Package] = field(default_factory=list)
    changed: list[tuple[Package, Change]] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"add        {p.id}" for p in self.added]
        for _package, change in self.changed:
            diffs = ", ".join(
                f"{path}: {old!r} -> {new!r}" for path, (old, new) in change.fields.items()
            )
            out.append(f"change     {change.package_id} ({diffs})")
        out += [f"leave      {package_id}" for package_id in self.unchanged]
        out += [f"deactivate {package_id}" for package_id in self.deactivated]
        return out

    def summary(self) -> str:
        return (
            f"{len(self.added)} to add, {len(self.changed)} to change, "
            f"{len(self.unchanged)} unchanged, {len(self.deactivated)} to deactivate"
        )


def _same(name: str, old: object, new: object) -> bool:
    if name in _QUANTITY_FIELDS:
        return same_value(str(old), str(new))
    if name == "price":
        return Decimal(str(old)) == Decimal(str(new))
    if name == "capacity" and isinstance(old, dict) and isinstance(new, dict):
        return old.keys() == new.keys() and all(same_value(old[k], new[k]) for k in old)
    return old == new


def _validated(index: int, entry: object) -> tuple[Package | None, list[str]]:
    fields, shape_errors = yaml_io.entry_to_fields(entry)
    problems = [
        f"packages[{index}].{path}: {msg}".replace("].:", "]:")
        for path, msg in shape_errors.items()
    ]
    if not fields:
        return None, problems
    candidate = Package(**fields)
    try:
        # Uniqueness is judged by the plan (an existing ID is a change, not an error).
        candidate.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        for name, messages in exc.message_dict.items():
            path = FIELD_PATHS.get(name, name)
            problems += [f"packages[{index}].{path}: {message}" for message in messages]
    return candidate, problems


def plan_import(entries: list, *, prune: bool = False) -> ImportPlan:
    """Validate every entry and work out what applying the file would do. Raises
    CatalogImportError listing every problem; never writes."""
    problems: list[str] = []
    candidates: list[Package] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        candidate, entry_problems = _validated(index, entry)
        problems += entry_problems
        if candidate is None:
            continue
        if candidate.id in seen:
            problems.append(
                f"packages[{index}].id: duplicates packages[{seen[candidate.id]}] ({candidate.id})."
            )
        seen.setdefault(candidate.id, index)
        candidates.append(candidate)
    if problems:
        raise CatalogImportError(problems)

    existing = {p.id: p for p in Package.objects.all()}
    plan = ImportPlan()
    for candidate in candidates:
        current = existing.get(candidate.id)
        if current is None:
            plan.added.append(candidate)
            continue
        diffs = {
            FIELD_PATHS[name]: (getattr(current, name), getattr(candidate, name))
            for name in _COMPARED_FIELDS
            if not _same(name, getattr(current, name), getattr(candidate, name))
        }
        if diffs:
            plan.changed.append((candidate, Change(candidate.id, diffs)))
        else:
            plan.unchanged.append(candidate.id)
    if prune:
        plan.deactivated = sorted(
            package_id
            for package_id, package in existing.items()
            if package_id not in seen and package.active
        )
    return plan


@transaction.atomic
def import_catalog(*, text: str, prune: bool = False, dry_run: bool = False) -> ImportPlan:
    """Apply a `packages:` document in one transaction: every entry lands or none does."""
    try:
        entries = yaml_io.parse_document(text)
    except yaml_io.CatalogFormatError as exc:
        raise CatalogImportError([str(exc)]) from exc
    # Lock the catalog rows so two imports cannot interleave their plans.
    list(Package.objects.select_for_update().values_list("id", flat=True))
    plan = plan_import(entries, prune=prune)
    if dry_run:
        return plan
    for package in plan.added:
        package.save(force_insert=True)
    for package, change in plan.changed:
        current = Package.objects.get(pk=package.id)
        for name in _COMPARED_FIELDS:
            if FIELD_PATHS[name] in change.fields:
                setattr(current, name, getattr(package, name))
        current.full_clean()
        current.save()
    if plan.deactivated:
        Package.objects.filter(id__in=plan.deactivated).update(active=False)
    return plan


def export_catalog(*, packages: QuerySet[Package] | None = None) -> str:
    """The catalog (or the given packages) as a `packages:` document, sorted by ID."""
    selected = Package.objects.all() if packages is None else packages
    return yaml_io.dump_document([yaml_io.package_to_entry(p) for p in selected.order_by("id")])
