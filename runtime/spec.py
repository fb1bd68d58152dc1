"""What a unit runs, declared once: the template (command, args, env, ports), access, storage
mounts, SSH and stopAfter, as DRF serializers and fields that check a JSON value of any shape
and name each problem by its API field path (`template.env[0].name`). The order's input
serializer (runtime/api/serializers.py) and the update service (runtime/actions.py) both check
through them, so an order and an update accept exactly the same units."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api.fields import StringField
from controlplane.validation import format_duration, parse_duration
from runtime import validation


class SecretRefSerializer(serializers.Serializer):
    """One key of one of the tenant's secrets (/secrets): the pod reads it from the Secret."""

    name = StringField(max_length=validation.SECRET_NAME_MAX, help_text="a secret's name")
    key = StringField(max_length=validation.SECRET_KEY_MAX, help_text="one of its keys")


class EnvVarSerializer(serializers.Serializer):
    """One environment variable of the unit's container: a value, or a secret's key (never
    both). A secret's value never enters the unit, only the reference."""

    name = StringField(max_length=256, help_text="a C identifier-like name, e.g. HF_HOME")
    value = StringField(required=False, allow_blank=True, max_length=validation.MAX_STRING)
    secretRef = SecretRefSerializer(required=False, help_text="instead of value")


def _strings(help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=StringField(allow_blank=True, max_length=validation.MAX_STRING),
        required=False,
        max_length=validation.MAX_ITEMS,
        help_text=help_text,
    )


class PortSerializer(serializers.Serializer):
    """A port the unit's container listens on; with ports the unit gets a Service."""

    name = StringField(max_length=15, help_text="IANA service name, e.g. http")
    port = serializers.IntegerField(min_value=1, max_value=65535)
    protocol = serializers.ChoiceField(choices=validation.PROTOCOLS, default="TCP", required=False)


class TemplateSerializer(serializers.Serializer):
    """The unit's container: command, arguments and environment (all optional; the image's
    own entrypoint runs without them). Devices, selectors and other pod fields come from the
    package and cannot be set here."""

    command = _strings('replaces the image\'s ENTRYPOINT, e.g. ["python", "-m", "http.server"]')
    args = _strings("replaces the image's CMD")
    env = serializers.ListField(
        child=EnvVarSerializer(), required=False, max_length=validation.MAX_ITEMS
    )
    ports = serializers.ListField(
        child=PortSerializer(), required=False, max_length=validation.MAX_PORTS
    )


class AccessSerializer(serializers.Serializer):
    """How the unit is reached: which port is primary and by what scheme (needs ports)."""

    primaryPort = StringField(required=False, help_text="a port's name; the first by default")
    scheme = serializers.ChoiceField(choices=validation.SCHEMES, default="http", required=False)


@extend_schema_field(AccessSerializer)
class AccessField(serializers.JSONField):
    """`access`, checked against the template's ports in CreateUnitSerializer.validate."""


@extend_schema_field(TemplateSerializer)
class TemplateField(serializers.JSONField):
    """`template` as the pure validator checks it, typed in the schema; its problems come back
    as a list of strings per field path (`template.env[0].name`), like every other field's."""

    def to_internal_value(self, data: object) -> dict:
        problems = validation.template(data)
        if problems:
            raise serializers.ValidationError(problems)
        assert isinstance(data, dict)
        template = {key: data[key] for key in ("command", "args") if data.get(key)}
        if data.get("env"):
            # One spelling: a variable without a value has the empty one, as in the pod.
            template["env"] = [
                {"name": e["name"], "secretRef": dict(e["secretRef"])}
                if "secretRef" in e
                else {"name": e["name"], "value": e.get("value", "")}
                for e in data["env"]
            ]
        if data.get("ports"):
            template["ports"] = [
                {"name": p["name"], "port": p["port"], "protocol": p.get("protocol", "TCP")}
                for p in data["ports"]
            ]
        return template


class StorageMountSerializer(serializers.Serializer):
    """One of the tenant's storages, mounted into the unit's container."""

    name = StringField(max_length=validation.STORAGE_NAME_MAX, help_text="a storage's name")
    mountPath = StringField(max_length=1024, help_text="an absolute path, not / or /dev/shm")
    readOnly = serializers.BooleanField(default=False, required=False)


@extend_schema_field(StorageMountSerializer(many=True))
class StorageMountsField(serializers.JSONField):
    """`storageMounts` as the pure validator checks and normalises it."""

    def to_internal_value(self, data: object) -> list:
        mounts, problems = validation.storage_mounts(data)
        if problems:
            raise serializers.ValidationError(problems)
        return mounts


class SSHSerializer(serializers.Serializer):
    """SSH into the unit with the tenant's registered keys (all of them unless named)."""

    enabled = serializers.BooleanField()
    keys = serializers.ListField(
        child=StringField(max_length=63), required=False, help_text="names from /ssh-keys"
    )


@extend_schema_field(SSHSerializer)
class SSHField(serializers.JSONField):
    def to_internal_value(self, data: object) -> dict:
        normalised, problems = validation.ssh(data)
        if problems:
            raise serializers.ValidationError(problems)
        return normalised


@extend_schema_field(
    {
        "type": "string",
        "maxLength": 16,
        "pattern": r"^(\d+d)?(\d+h)?(\d+m)?(\d+s)?$",
        "example": "8h",
    }
)
class DurationField(StringField):
    """A duration such as "8h" or "1h30m" (whole days, hours, minutes, seconds; 1s to 366d)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=16, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        return _duration(value) if value else ""


def _duration(value: str) -> str:
    seconds, problem = parse_duration(value.strip())
    if problem or seconds is None:
        raise serializers.ValidationError(problem)
    return format_duration(seconds)


def check_image(value: str) -> str:
    value = value.strip()
    problem = validation.image_reference(value, allowlist=settings.IMAGE_REGISTRY_ALLOWLIST)
    if problem:
        raise serializers.ValidationError(problem)
    return value


def check_access(attrs: dict) -> dict:
    """`access` against the template's ports (a primary port must be one of them)."""
    ports = (attrs.get("template") or {}).get("ports") or []
    normalised, problems = validation.access(attrs.get("access"), ports)
    if problems:
        raise serializers.ValidationError({path: [m] for path, m in problems.items()})
    attrs["access"] = normalised
    return attrs


class UnitSpecSerializer(serializers.Serializer):
    """A unit's changeable fields after an update's merge, checked as an order checks them."""

    image = StringField(max_length=validation.MAX_IMAGE)
    template = TemplateField(required=False)
    access = AccessField(required=False)
    storageMounts = StorageMountsField(required=False)
    ssh = SSHField(required=False)
    stopAfter = DurationField(required=False, allow_blank=True)

    def validate_image(self, value: str) -> str:
        return check_image(value)

    def validate(self, attrs: dict) -> dict:
        return check_access(attrs)

    def to_internal_value(self, data):
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(flatten(exc.detail)) from None


def flatten(detail):
    """{"template": {"template.env[0].name": ["..."]}} -> {"template.env[0].name": ["..."]},
    and the same for storageMounts."""
    if not isinstance(detail, dict):
        return detail
    flat = dict(detail)
    for field in ("template", "storageMounts", "ssh"):
        if isinstance(detail.get(field), dict):
            del flat[field]
            for path, messages in detail[field].items():
                flat[path] = messages if isinstance(messages, list) else [messages]
    return flat
