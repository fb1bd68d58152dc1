"""GPU unit API shapes: strict input (unknown fields rejected), camelCase output."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing import periods
from controlplane.api.fields import StrictSerializer, StringField
from controlplane.api.pagination import DEFAULT_LIMIT, MAX_LIMIT
from controlplane.validation import dns_label, fold_case
from runtime import access, reservations, spec, validation
from runtime import storage as storage_service
from runtime.errors import ImmutableField
from runtime.models import (
    GPUStorage,
    GPUUnit,
    Operation,
    Reservation,
    TenantSecret,
    UnitEvent,
    UnitPhase,
)


class CreateUnitSerializer(spec.BodySerializer):
    """An order for one GPU unit of a package. Fields not listed here are refused; a problem
    anywhere is named by its field path (`template.ports[0].protocol`)."""

    operationID = StringField(max_length=128, trim_whitespace=False)
    name = StringField(max_length=validation.UNIT_NAME_MAX)
    packageID = StringField(max_length=63)
    image = StringField(max_length=validation.MAX_IMAGE)
    template = spec.TemplateSerializer(required=False)
    access = spec.AccessSerializer(required=False)
    storageMounts = spec.StorageMountsField(required=False)
    ssh = spec.SSHSerializer(required=False)
    stopAfter = spec.DurationField(
        required=False,
        help_text='auto-stop: a duration such as "8h" or "1h30m" after each start (at most '
        "the package's and the tenant's maximum, which applies when this is left out)",
    )
    region = StringField(
        max_length=63,
        required=False,
        help_text="the region to run in (GET /regions); left out: wherever the package fits",
    )
    interruptible = serializers.BooleanField(
        required=False,
        default=False,
        help_text="true: an interruptible unit of a package sold as one (GET /packages "
        "`interruptible`), at its interruptible price, taken back with the package's notice "
        "when an on-demand unit needs its devices",
    )
    autoResume = serializers.BooleanField(
        required=False,
        default=False,
        help_text="an interruptible unit only: once preempted, the control plane starts it "
        "again when its package fits its cluster again",
    )
    reservation = StringField(
        max_length=validation.RESERVATION_NAME_MAX,
        required=False,
        help_text="an active reservation of yours (GET /reservations) for this package: the "
        "unit takes one of its slots and runs on the devices it holds",
    )

    def validate_operationID(self, value: str) -> str:
        return _operation_id(value)

    def validate_name(self, value: str) -> str:
        value = fold_case(value.strip())
        problem = validation.unit_name(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate_packageID(self, value: str) -> str:
        return fold_case(value.strip())

    def validate_image(self, value: str) -> str:
        return spec.check_image(value)

    def validate_region(self, value: str) -> str:
        value = fold_case(value.strip())
        if problem := dns_label(value):
            raise serializers.ValidationError(problem)
        return value

    def validate(self, attrs: dict) -> dict:
        return spec.check_access(attrs)


def _operation_id(value: str) -> str:
    if not validation.OPERATION_ID.fullmatch(value):
        raise serializers.ValidationError(
            "operationID must be 1-128 characters of letters, digits, '.', '_', ':' or '-'."
        )
    return value


class ActionSerializer(StrictSerializer):
    """A stop, start or restart: only the operationID that makes it idempotent."""

    operationID = StringField(max_length=128, trim_whitespace=False)

    def validate_operationID(self, value: str) -> str:
        return _operation_id(value)


# Fields of a unit fixed at creation: an update naming them is refused as immutable.
IMMUTABLE_FIELDS = (
    "name",
    "packageID",
    "specName",
    "cpu",
    "memory",
    "gpu",
    "allocation",
    "namespace",
    "uid",
)


def _patch_of(
    serializer: type[serializers.Serializer], *, many: bool = False
) -> type[serializers.JSONField]:
    """A JSONField documented as a merge patch of `serializer`'s object (or a whole list of
    them, which a merge patch replaces): the view merges and checks it."""
    shape = serializer(many=True) if many else serializer(partial=True)
    return extend_schema_field(shape)(
        type(f"{serializer.__name__}Patch", (serializers.JSONField,), {})
    )


class UpdateUnitSerializer(StrictSerializer):
    """A JSON merge patch (RFC 7396) of the unit's changeable fields: a field left out stays,
    null clears it, objects merge key by key, lists are replaced. The merged unit is then
    checked as an order would be (spec.UnitSpecSerializer)."""

    operationID = StringField(max_length=128, trim_whitespace=False)
    image = StringField(max_length=validation.MAX_IMAGE, required=False)
    # Merged into the unit's own, then checked whole (UnitSpecSerializer); the schema shows
    # the shapes a patch of each takes (every field optional, null to clear).
    template = _patch_of(spec.TemplateSerializer)(required=False, allow_null=True)
    access = _patch_of(spec.AccessSerializer)(required=False, allow_null=True)
    ssh = _patch_of(spec.SSHSerializer)(required=False, allow_null=True)
    storageMounts = _patch_of(spec.StorageMountSerializer, many=True)(
        required=False, allow_null=True
    )
    stopAfter = spec.DurationField(
        required=False, allow_null=True, help_text="null: the maximum, or none"
    )

    def validate_operationID(self, value: str) -> str:
        return _operation_id(value)

    def to_internal_value(self, data):
        if isinstance(data, dict) and (named := [f for f in IMMUTABLE_FIELDS if f in data]):
            raise ImmutableField(
                f"{', '.join(named)} cannot change after creation; a different package is a "
                "new unit (order one, then delete this one).",
                details={"fields": {field: ["This field is immutable."] for field in named}},
            )
        return super().to_internal_value(data)


class UnitListQuerySerializer(serializers.Serializer):
    """Query parameters of GET /gpu-units."""

    phase = serializers.ChoiceField(choices=UnitPhase.choices, required=False)
    packageID = serializers.RegexField(r"^[A-Za-z0-9-]{1,63}$", required=False)
    region = serializers.RegexField(
        r"^[A-Za-z0-9-]{1,63}$", required=False, help_text="only the units placed in this region"
    )
    include = serializers.ChoiceField(
        choices=["terminated"],
        required=False,
        help_text="terminated: list Terminated units too (left out by default)",
    )
    cursor = serializers.CharField(
        max_length=512, required=False, help_text="meta.nextCursor of the previous page (opaque)"
    )
    limit = serializers.IntegerField(
        min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT, help_text="page size"
    )


class UnitLogQuerySerializer(serializers.Serializer):
    """Query parameters of GET /gpu-units/{name}/logs (the pod log API's, in camelCase)."""

    container = serializers.RegexField(
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        max_length=63,
        required=False,
        help_text="a container of the unit's pod (default: the unit's workload)",
    )
    tailLines = serializers.IntegerField(min_value=1, max_value=100_000, required=False)
    sinceSeconds = serializers.IntegerField(min_value=1, required=False)
    timestamps = serializers.BooleanField(default=False, help_text="RFC 3339 time per line")
    follow = serializers.BooleanField(
        default=False,
        help_text=(
            "stream new lines, for at most LOGS_FOLLOW_SECONDS and LOGS_FOLLOW_MAX_BYTES; "
            "followers open at once are capped (429 `throttled` with Retry-After)"
        ),
    )


class UnitAllocationSerializer(serializers.Serializer):
    deviceClassName = serializers.CharField(source="device_class_name")
    claimName = serializers.CharField(source="claim_name")
    claimRequestName = serializers.CharField(source="claim_request_name")
    count = serializers.IntegerField()
    matchAttribute = serializers.CharField(
        source="match_attribute",
        required=False,
        help_text="the attribute every device of the unit agrees on (absent when none)",
    )
    alternatives = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="a fallback package's alternatives, in order (absent for others)",
    )

    def to_representation(self, instance):
        shown = super().to_representation(instance)
        for optional in ("alternatives", "matchAttribute"):
            if not shown.get(optional):
                shown.pop(optional, None)
        return shown


class DeviceSerializer(serializers.Serializer):
    request = serializers.CharField(help_text='"<request>/<alternative>" for a fallback package')
    driver = serializers.CharField()
    pool = serializers.CharField()
    device = serializers.CharField()
    shareID = serializers.CharField(required=False, help_text="the share, on a shared device")
    consumedCapacity = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="what the share takes"
    )


class DraStatusSerializer(serializers.Serializer):
    claimName = serializers.CharField()
    allocated = serializers.BooleanField()
    devices = DeviceSerializer(many=True)
    alternative = serializers.CharField(
        required=False, help_text="the fallback package's alternative allocated (primary: its own)"
    )


class EndpointSerializer(serializers.Serializer):
    name = serializers.CharField()
    port = serializers.IntegerField()
    protocol = serializers.CharField()
    url = serializers.CharField(allow_null=True, help_text="null until the address is known")


class UnitAccessSerializer(serializers.Serializer):
    primaryPort = serializers.CharField(required=False)
    scheme = serializers.CharField(required=False)
    url = serializers.CharField(allow_null=True, help_text="the primary port's URL")
    endpoints = EndpointSerializer(many=True)


class UnitSSHSerializer(serializers.Serializer):
    enabled = serializers.BooleanField()
    keys = serializers.ListField(child=serializers.CharField(), required=False)
    username = serializers.CharField(required=False)
    host = serializers.CharField(required=False, allow_null=True)
    port = serializers.IntegerField(required=False, allow_null=True)
    command = serializers.CharField(
        required=False, allow_null=True, help_text="e.g. ssh -p 31022 runtime@gpu.example.com"
    )


class PreemptionSerializer(serializers.Serializer):
    reason = serializers.CharField()
    noticeAt = serializers.DateTimeField()
    preemptAt = serializers.DateTimeField()


class UnitSerializer(serializers.ModelSerializer):
    operationID = serializers.CharField(source="operation_id")
    packageID = serializers.CharField(source="package_id")
    specName = serializers.CharField(source="spec_name")
    allocation = UnitAllocationSerializer(source="*")
    draStatus = serializers.SerializerMethodField()
    nodeName = serializers.CharField(source="node_name")
    region = serializers.CharField(help_text="the region of the unit's cluster")
    cluster = serializers.CharField(help_text="the cluster the unit was placed in, for good")
    interruptible = serializers.BooleanField(
        help_text="billed at the package's interruptible price; may be taken back with notice"
    )
    autoResume = serializers.BooleanField(
        source="auto_resume",
        help_text="started again by the control plane once preempted and there is room",
    )
    preemption = serializers.SerializerMethodField(
        help_text="null unless an interruptible unit is told its devices are taken back: "
        "{reason: CapacityReclaimed, noticeAt, preemptAt}; at preemptAt it is stopped (its "
        "containers then get their grace) and ends Preempted"
    )
    reservation = serializers.SerializerMethodField(
        help_text="the reservation whose devices it was ordered on, or null"
    )
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")
    lastSyncTime = serializers.DateTimeField(source="last_sync_at", allow_null=True)

    template = serializers.SerializerMethodField()
    access = serializers.SerializerMethodField()
    storageMounts = serializers.SerializerMethodField()
    ssh = serializers.SerializerMethodField()
    runPolicy = serializers.CharField(source="run_policy")
    observedGeneration = serializers.IntegerField(
        source="observed_generation",
        help_text="the generation the cluster's objects were last brought to; below "
        "`generation` while a stop, start, restart or update is carried out",
    )
    etag = serializers.CharField(help_text="send it in If-Match to update the unit")
    stopAfter = serializers.CharField(source="stop_after", help_text='"" when none')
    stopsAt = serializers.DateTimeField(
        source="stops_at", allow_null=True, help_text="when auto-stop stops the unit"
    )
    costToDate = serializers.SerializerMethodField(
        help_text="what the unit has cost so far, in the billing currency (a running unit's "
        "up to now): the usage ledger's rows and its running meter"
    )

    class Meta:
        model = GPUUnit
        fields = [
            "uid",
            "name",
            "namespace",
            "operationID",
            "packageID",
            "specName",
            "region",
            "cluster",
            "interruptible",
            "autoResume",
            "preemption",
            "reservation",
            "image",
            "template",
            "access",
            "storageMounts",
            "ssh",
            "cpu",
            "memory",
            "gpu",
            "allocation",
            "phase",
            "reason",
            "message",
            "draStatus",
            "nodeName",
            "runPolicy",
            "generation",
            "observedGeneration",
            "etag",
            "stopAfter",
            "stopsAt",
            "costToDate",
            "createdAt",
            "updatedAt",
            "lastSyncTime",
        ]

    @extend_schema_field(PreemptionSerializer(allow_null=True))
    def get_preemption(self, unit: GPUUnit) -> dict | None:
        found = unit.preemption or {}
        return {k: found[k] for k in ("reason", "noticeAt", "preemptAt") if k in found} or None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_reservation(self, unit: GPUUnit) -> str | None:
        # A slot lent to an interruptible unit is not its owner's to show.
        if unit.interruptible or not unit.reservation_id or unit.reservation is None:
            return None
        return unit.reservation.name

    def get_costToDate(self, unit: GPUUnit) -> str:
        # Set by the view from billing.selectors.cost_to_date (one query for a page of units).
        return periods.cost_text(unit.cost_to_date)

    @extend_schema_field(spec.TemplateSerializer)
    def get_template(self, unit: GPUUnit) -> dict:
        return unit.template or {}

    @extend_schema_field(spec.StorageMountSerializer(many=True))
    def get_storageMounts(self, unit: GPUUnit) -> list[dict]:
        # Stored normalised (validation.storage_mounts): rendered as is, no nested serializer
        # per unit of a list.
        return unit.storage_mounts or []

    @extend_schema_field(UnitSSHSerializer)
    def get_ssh(self, unit: GPUUnit) -> dict:
        return access.ssh_for_unit(unit)

    @extend_schema_field(UnitAccessSerializer)
    def get_access(self, unit: GPUUnit) -> dict:
        return access.for_unit(unit)

    @extend_schema_field(DraStatusSerializer)
    def get_draStatus(self, unit: GPUUnit) -> dict:
        dra = unit.dra or {}
        shown = {
            "claimName": dra.get("claimName", unit.claim_name),
            "allocated": bool(dra.get("allocated")),
            "devices": list(dra.get("devices") or []),
        }
        if dra.get("alternative"):
            shown["alternative"] = dra["alternative"]
        return shown


class UnitEventSerializer(serializers.ModelSerializer):
    firstSeen = serializers.DateTimeField(source="first_seen")
    lastSeen = serializers.DateTimeField(source="last_seen")

    class Meta:
        model = UnitEvent
        fields = ["type", "reason", "message", "count", "firstSeen", "lastSeen"]


class OperationErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class OperationSerializer(serializers.ModelSerializer):
    operationID = serializers.CharField(source="operation_id")
    unitName = serializers.CharField(source="unit.name")
    error = serializers.SerializerMethodField()
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")
    finishedAt = serializers.DateTimeField(source="finished_at", allow_null=True)

    class Meta:
        model = Operation
        fields = [
            "operationID",
            "kind",
            "status",
            "attempts",
            "unitName",
            "error",
            "createdAt",
            "updatedAt",
            "finishedAt",
        ]

    @extend_schema_field(OperationErrorSerializer(allow_null=True))
    def get_error(self, operation: Operation) -> dict | None:
        if not operation.error_code:
            return None
        return {"code": operation.error_code, "message": operation.error_message}


class CreateStorageSerializer(StrictSerializer):
    """A persistent volume for the tenant's units; it outlives them."""

    name = StringField(max_length=validation.STORAGE_NAME_MAX, help_text="a DNS label")
    size = StringField(max_length=32, help_text='a Kubernetes quantity, e.g. "100Gi"')
    storageClass = StringField(
        max_length=253, required=False, help_text="a StorageClass (default: the cluster's)"
    )
    accessMode = serializers.ChoiceField(
        choices=["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"],
        default="ReadWriteOnce",
        required=False,
        help_text="ReadWriteOnce storages are mounted by one live unit at a time",
    )
    region = StringField(
        max_length=63,
        required=False,
        help_text="the region it lives in (GET /regions); the units that mount it run there. "
        "Left out: the first region taking new work",
    )

    def validate_region(self, value: str) -> str:
        value = fold_case(value.strip())
        if problem := dns_label(value):
            raise serializers.ValidationError(problem)
        return value


class StorageSerializer(serializers.ModelSerializer):
    storageClass = serializers.CharField(source="storage_class")
    accessMode = serializers.CharField(source="access_mode")
    claimName = serializers.CharField(source="claim_name")
    mountedBy = serializers.SerializerMethodField()
    createdAt = serializers.DateTimeField(source="created_at")

    class Meta:
        model = GPUStorage
        fields = [
            "name",
            "size",
            "storageClass",
            "accessMode",
            "region",
            "cluster",
            "phase",
            "message",
            "claimName",
            "mountedBy",
            "createdAt",
        ]

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_mountedBy(self, storage: GPUStorage) -> list[str]:
        mounted = self.context.get("mounted_by")
        if mounted is not None:
            return sorted(mounted.get(storage.name, []))
        return storage_service.mounted_by(storage)


class CreateReservationSerializer(StrictSerializer):
    """Devices held for you from `start` to `end`: `count` units' worth of a package."""

    name = StringField(max_length=validation.RESERVATION_NAME_MAX, help_text="a DNS label")
    packageID = StringField(max_length=63)
    count = serializers.IntegerField(min_value=1, help_text="units' worth of the package")
    start = serializers.DateTimeField(help_text="RFC 3339; now or later (a past one: now)")
    end = serializers.DateTimeField(help_text="RFC 3339, after start")
    region = StringField(
        max_length=63,
        required=False,
        help_text="the region to hold them in (GET /regions); left out: wherever it fits",
    )
    atEnd = serializers.ChoiceField(
        choices=["keep", "stop"],
        default="keep",
        required=False,
        help_text="what becomes of its units at its end: keep running (on demand), or stop",
    )

    def validate_name(self, value: str) -> str:
        value = fold_case(value.strip())
        if problem := validation.reservation_name(value):
            raise serializers.ValidationError(problem)
        return value

    def validate_region(self, value: str) -> str:
        value = fold_case(value.strip())
        if problem := dns_label(value):
            raise serializers.ValidationError(problem)
        return value


class ReservationSerializer(serializers.ModelSerializer):
    packageID = serializers.CharField(source="package_id")
    atEnd = serializers.CharField(source="at_end")
    held = serializers.SerializerMethodField(
        help_text="slots whose devices are held now (by a placeholder or a unit)"
    )
    inUse = serializers.SerializerMethodField(help_text="slots its live units take")
    free = serializers.SerializerMethodField(help_text="slots an order can still take")
    devices = serializers.IntegerField(help_text="devices it holds in its window")
    createdAt = serializers.DateTimeField(source="created_at")

    class Meta:
        model = Reservation
        fields = [
            "uid",
            "name",
            "packageID",
            "count",
            "devices",
            "start",
            "end",
            "atEnd",
            "region",
            "cluster",
            "status",
            "message",
            "held",
            "inUse",
            "free",
            "createdAt",
        ]

    def _usage(self, reservation: Reservation) -> reservations.Usage:
        """From the view's context (one query for a page), else read once per reservation."""
        known: dict = self.__dict__.setdefault(
            "_usage_known", dict(self.context.get("usage") or {})
        )
        if reservation.pk not in known:
            known.update(reservations.usage([reservation]))
        return known[reservation.pk]

    def get_held(self, reservation: Reservation) -> int:
        return self._usage(reservation).held

    def get_inUse(self, reservation: Reservation) -> int:
        return self._usage(reservation).in_use

    def get_free(self, reservation: Reservation) -> int:
        return self._usage(reservation).free


class CreateSecretSerializer(spec.BodySerializer):
    """A tenant secret: keys and values a unit reads by `template.env[].secretRef`. Sending
    a name again replaces the secret's keys and values."""

    name = StringField(
        max_length=validation.SECRET_NAME_MAX,
        help_text="a DNS label; the Kubernetes Secret is secret-<name>",
    )
    # The metaclass takes declared fields off the class, so Serializer.data stays as it is.
    data = serializers.DictField(  # type: ignore[assignment]
        child=StringField(allow_blank=True, trim_whitespace=False),
        allow_empty=False,
        help_text="KEY: value, at most 64 keys of letters, digits, '-', '_', '.'; keys and "
        "values together at most 1 MiB. Values are never shown again.",
    )


class SecretSerializer(serializers.ModelSerializer):
    """A secret as the API shows it: its keys, never its values."""

    keys = serializers.ListField(child=serializers.CharField(), help_text="its key names")
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")

    class Meta:
        model = TenantSecret
        fields = ["name", "keys", "createdAt", "updatedAt"]


class RegionClusterSerializer(serializers.Serializer):
    name = serializers.CharField()
    displayName = serializers.CharField()
    health = serializers.ChoiceField(
        choices=["reachable", "unreachable", "unknown"],
        help_text="unreachable: its listings have failed for CLUSTER_LOST_AFTER_SECONDS; "
        "unknown: not listed yet",
    )
    cordoned = serializers.BooleanField(help_text="takes no new units; what runs there stays")
    asOf = serializers.DateTimeField(
        allow_null=True, help_text="when the inventory last listed the cluster"
    )


class RegionPackageSerializer(serializers.Serializer):
    packageID = serializers.CharField()
    placeableNow = serializers.IntegerField(help_text="more units that fit in the region now")
    freeDevices = serializers.IntegerField(help_text="free devices there the package could use")


class RegionSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="what a create names in `region`")
    takesUnits = serializers.BooleanField(
        help_text="a cluster of the region takes new units now (reachable, not cordoned)"
    )
    clusters = RegionClusterSerializer(many=True)
    packages = RegionPackageSerializer(
        many=True, help_text="the packages on sale in the region, and what fits of each"
    )
