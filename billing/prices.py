"""Price versions: recorded whenever a package's prices are saved (the admin, a YAML import),
effective from that moment; read back per package and alternative for the ledger."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils import timezone

from billing.models import PriceVersion
from catalog.models import Package

# The subrequest name of a fallback package's own class (its firstAvailable's first entry).
PRIMARY = "primary"
# The key an interruptible unit's price is kept under, whatever alternative it got: not a DNS
# label, so no alternative can be named so.
INTERRUPTIBLE = "@interruptible"

Versions = dict[tuple[str, str], list[PriceVersion]]


def price_key(alternative: str, *, interruptible: bool = False) -> str:
    """The alternative a price version is kept under: "" for the package's own class,
    INTERRUPTIBLE for every interruptible unit."""
    if interruptible:
        return INTERRUPTIBLE
    return "" if alternative in ("", PRIMARY) else alternative


def wanted_prices(package: Package) -> dict[str, Decimal]:
    """Every price a unit of `package` can be billed at, by alternative ("" its own)."""
    prices = {"": Decimal(package.price)}
    for alternative in package.alternatives or []:
        prices[alternative["name"]] = package.price_of(alternative["name"])
    if package.interruptible:
        prices[INTERRUPTIBLE] = package.price_of(interruptible=True)
    return prices


def record_package_prices(package: Package, *, at: datetime | None = None) -> list[PriceVersion]:
    """Record a new version for each of the package's prices that differs from the one last
    recorded (a first save records them all), effective `at` (now). The past is never
    rewritten: a version's price and start never change."""
    at = at or timezone.now()
    latest: dict[str, PriceVersion] = {}
    for version in PriceVersion.objects.filter(package_id=package.id).order_by("effective_from"):
        latest[version.alternative] = version
    new = [
        PriceVersion(
            package_id=package.id,
            alternative=alternative,
            hourly=hourly,
            currency=settings.BILLING_CURRENCY,
            effective_from=at,
        )
        for alternative, hourly in wanted_prices(package).items()
        if alternative not in latest
        or latest[alternative].hourly != hourly
        or latest[alternative].currency != settings.BILLING_CURRENCY
    ]
    if new:
        PriceVersion.objects.bulk_create(new)
    return new


def package_saved(sender: type, instance: Package, raw: bool = False, **kwargs: Any) -> None:
    """post_save receiver on Package (connected in billing.apps)."""
    if not raw:
        record_package_prices(instance)


def versions_for(package_ids: Iterable[str]) -> Versions:
    """Every version of these packages, by (package, alternative), oldest first."""
    found: Versions = defaultdict(list)
    for version in PriceVersion.objects.filter(package_id__in=set(package_ids)).order_by(
        "effective_from"
    ):
        found[(version.package_id, version.alternative)].append(version)
    return found


def versions_of(versions: Versions, package_id: str, alternative: str) -> list[PriceVersion]:
    """An alternative's versions, or the package's own when the alternative has none."""
    return versions.get((package_id, price_key(alternative))) or versions.get((package_id, ""), [])
