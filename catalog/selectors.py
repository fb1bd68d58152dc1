"""Catalog reads."""

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


def max_stop_after(package_id: str) -> str:
    """The package's longest stopAfter ("" when it sets none, or is gone), active or not: a
    unit keeps its package's limit after the package leaves the catalog."""
    value = Package.objects.filter(id=package_id).values_list("max_stop_after", flat=True).first()
    return value or ""
