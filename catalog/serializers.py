"""Package JSON in the article's shape (camelCase, allocation block), plus availability."""

from decimal import Decimal

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog.models import MAX_TERMINATION_GRACE_SECONDS, Package
from catalog.validation import money


class PackageAllocationSerializer(serializers.Serializer):
    deviceClassName = serializers.CharField()
    claimRequestName = serializers.CharField()
    count = serializers.IntegerField()
    selectors = serializers.ListField(child=serializers.CharField(), required=False)
    capacity = serializers.DictField(child=serializers.CharField(), required=False)


class AvailabilitySerializer(serializers.Serializer):
    placeableNow = serializers.IntegerField(help_text="more units of this package that fit now")
    freeDevices = serializers.IntegerField(help_text="free devices this package could use")
    reason = serializers.CharField(help_text="why placeableNow is 0 (empty otherwise)")
    asOf = serializers.DateTimeField(allow_null=True, help_text="time of the inventory sync")
    stale = serializers.BooleanField()


class PackageRegionSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="a region the package is sold in (GET /regions)")
    placeableNow = serializers.IntegerField(
        help_text="more units that fit there now (0 while no cluster of it takes new units)"
    )
    freeDevices = serializers.IntegerField(help_text="free devices there this package could use")


class PriceSerializer(serializers.Serializer):
    hourly = serializers.CharField(help_text='per hour a unit runs, e.g. "2.49"')
    currency = serializers.CharField(help_text="ISO 4217")
    alternatives = serializers.DictField(
        child=serializers.CharField(),
        required=False,
        help_text="hourly price of a unit that got a fallback alternative, by its name",
    )


class InterruptibleSerializer(serializers.Serializer):
    hourly = serializers.CharField(help_text="hourly price of an interruptible unit")
    currency = serializers.CharField()
    noticeSeconds = serializers.IntegerField(
        help_text="seconds between an interruptible unit's preemption notice and the deletion "
        "of its pod (which then gets its termination grace)"
    )


class PackageSerializer(serializers.ModelSerializer):
    specName = serializers.CharField(source="spec_name")
    allocation = PackageAllocationSerializer(read_only=True)
    terminationGracePeriodSeconds = serializers.IntegerField(
        source="termination_grace_seconds",
        read_only=True,
        min_value=0,
        max_value=MAX_TERMINATION_GRACE_SECONDS,
        help_text="seconds a unit's containers get after SIGTERM when it is stopped, restarted "
        "or deleted, before they are killed; the unit is billed until its devices are "
        "released, so up to this long after the request",
    )
    price = serializers.SerializerMethodField()
    interruptible = serializers.SerializerMethodField(
        help_text="null: not sold as interruptible. Else an interruptible unit (create with "
        '"interruptible": true) costs this, runs on free capacity and is taken back with this '
        "notice when an on-demand order needs its devices."
    )
    availability = serializers.SerializerMethodField()
    regions = serializers.SerializerMethodField()

    class Meta:
        model = Package
        fields = [
            "id",
            "specName",
            "cpu",
            "memory",
            "gpu",
            "allocation",
            "terminationGracePeriodSeconds",
            "price",
            "interruptible",
            "availability",
            "regions",
        ]

    @extend_schema_field(PriceSerializer)
    def get_price(self, package: Package) -> dict:
        price: dict = {
            "hourly": money(Decimal(package.price)),
            "currency": settings.BILLING_CURRENCY,
        }
        if package.alternatives:
            price["alternatives"] = {
                a["name"]: money(package.price_of(a["name"])) for a in package.alternatives
            }
        return price

    @extend_schema_field(InterruptibleSerializer(allow_null=True))
    def get_interruptible(self, package: Package) -> dict | None:
        if not package.interruptible:
            return None
        return {
            "hourly": money(Decimal(package.interruptible_price)),
            "currency": settings.BILLING_CURRENCY,
            "noticeSeconds": package.preemption_notice_seconds,
        }

    @extend_schema_field(AvailabilitySerializer)
    def get_availability(self, package: Package) -> dict | None:
        found = self.context.get("availability", {}).get(package.id)
        return {k: v for k, v in found.items() if k != "regions"} if found else found

    @extend_schema_field(PackageRegionSerializer(many=True))
    def get_regions(self, package: Package) -> list[dict]:
        found = self.context.get("availability", {}).get(package.id)
        return found["regions"] if found else []
