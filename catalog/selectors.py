"""Catalog reads."""

import difflib

from django.db.models import QuerySet

from catalog.models import Package
from controlplane.validation import dns_label, fold_case


def list_active_packages() -> QuerySet[Package]:
    return Package.objects.filter(active=True).order_by("id")


def get_active_package(package_id: str) -> Package | None:
    package_id = fold_case(package_id.strip())
    if dns_label(package_id):
        return None  # cannot exist; never send it to the database
    return Package.objects.filter(active=True, id=package_id).first()


def unknown_package(package_id: object) -> str:
    """What an order naming no package on sale is told: where the packages are listed, and
    the one it may have meant (only when asked, so a valid order never reads the catalog)."""
    offered = list(list_active_packages().values_list("id", flat=True))
    near = difflib.get_close_matches(str(package_id), offered, n=1, cutoff=0.6)
    guess = f" Did you mean {near[0]}?" if near else ""
    return f"No package {package_id} is on sale: GET /packages lists those that are.{guess}"


def max_stop_after(package_id: str) -> str:
    """The package's longest stopAfter ("" when it sets none, or is gone), active or not: a
    unit keeps its package's limit after the package leaves the catalog."""
    value = Package.objects.filter(id=package_id).values_list("max_stop_after", flat=True).first()
    return value or ""
