"""GPU unit API shapes: strict input (unknown fields rejected), camelCase output."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api.pagination import DEFAULT_LIMIT, MAX_LIMIT
from runtime import validation
from runtime.models import GPUUnit, Operation, UnitEvent, UnitPhase


class StrictSerializer(serializers.Serializer):
    """Rejects fields the API does not define instead of silently ignoring them."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class EnvVarSerializer(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.CharField(required=False, allow_blank=True)


class TemplateSerializer(serializers.Serializer):
    """Optional workload settings; device classes, selectors and raw pod fields are not here."""

    command = serializers.ListField(child=serializers.CharField(), required=False)
    args = serializers.ListField(child=serializers.CharField(), required=False)
    env = EnvVarSerializer(many=True, required=False)


class CreateUnitSerializer(StrictSerializer):
    operationID = serializers.CharField(max_length=128, trim_whitespace=False)
    name = serializers.CharField(max_length=254)
    packageID = serializers.CharField(max_length=253)
    image = serializers.CharField(max_length=validation.MAX_IMAGE)
    template = serializers.JSONField(required=False)

    def validate_operationID(self, value: str) -> str:
        if not validation.OPERATION_ID.fullmatch(value):
            raise serializers.ValidationError(
                "operationID must be 1-128 characters of letters, digits, '.', '_', ':' or '-'."
            )
        return value

    def validate_name(self, value: str) -> str:
        value = value.strip().lower()
        problem = validation.unit_name(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate_packageID(self, value: str) -> str:
        return value.strip().lower()

    def validate_image(self, value: str) -> str:
        value = value.strip()
        problem = validation.image_reference(value, allowlist=settings.IMAGE_REGISTRY_ALLOWLIST)
        if problem:
            raise serializers.ValidationError(problem)
        return value

    def validate_template(self, value: object) -> dict:
        problems = validation.template(value)
        if problems:
            raise serializers.ValidationError(problems)
        return {key: value[key] for key in ("command", "args", "env") if value.get(key)}


class UnitListQuerySerializer(serializers.Serializer):
    """Query parameters of GET /gpu-units."""

    phase = serializers.ChoiceField(choices=UnitPhase.choices, required=False)
    packageID = serializers.RegexField(r"^[A-Za-z0-9-]{1,63}$", required=False)
    cursor = serializers.RegexField(
        r"^[0-9]{1,18}$", required=False, help_text="meta.nextCursor of the previous page"
    )
    limit = serializers.IntegerField(
        min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT, help_text="page size"
    )


class UnitAllocationSerializer(serializers.Serializer):
    deviceClassName = serializers.CharField(source="device_class_name")
    claimName = serializers.CharField(source="claim_name")
    claimRequestName = serializers.CharField(source="claim_request_name")
    count = serializers.IntegerField()


class DeviceSerializer(serializers.Serializer):
    request = serializers.CharField()
    driver = serializers.CharField()
    pool = serializers.CharField()
    device = serializers.CharField()


class DraStatusSerializer(serializers.Serializer):
    claimName = serializers.CharField()
    allocated = serializers.BooleanField()
    devices = DeviceSerializer(many=True)


class UnitSerializer(serializers.ModelSerializer):
    operationID = serializers.CharField(source="operation_id")
    packageID = serializers.CharField(source="package_id")
    specName = serializers.CharField(source="spec_name")
    allocation = UnitAllocationSerializer(source="*")
    draStatus = serializers.SerializerMethodField()
    nodeName = serializers.CharField(source="node_name")
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")
    lastSyncTime = serializers.DateTimeField(source="last_sync_at", allow_null=True)

    class Meta:
        model = GPUUnit
        fields = [
            "uid",
            "name",
            "namespace",
            "operationID",
            "packageID",
            "specName",
            "image",
            "template",
            "cpu",
            "memory",
            "gpu",
            "allocation",
            "phase",
            "reason",
            "message",
            "draStatus",
            "nodeName",
            "createdAt",
            "updatedAt",
            "lastSyncTime",
        ]

    @extend_schema_field(DraStatusSerializer)
    def get_draStatus(self, unit: GPUUnit) -> dict:
        dra = unit.dra or {}
        return {
            "claimName": dra.get("claimName", unit.claim_name),
            "allocated": bool(dra.get("allocated")),
            "devices": list(dra.get("devices") or []),
        }


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
