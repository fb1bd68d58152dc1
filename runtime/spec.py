"""What a unit runs, declared once: the template (command, args, env, ports), access, storage
mounts, SSH and stopAfter, as DRF serializers that both check a body and document it in the
OpenAPI schema. Each declared field takes only its own JSON type (a string is never a number,
a boolean never "yes"), so a value of the wrong shape anywhere is refused by the declaration
itself; what a well-shaped value must also satisfy (names, reserved variables and paths,
duplicates, access against the ports) is runtime/validation.py's rules, run by the serializers'
validate(). Every problem is named by its API field path (`template.env[0].name`). The order's
input serializer (runtime/api/serializers.py) and the update service (runtime/actions.py) both
check through them, so an order and an update accept exactly the same units."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.settings import api_settings

from controlplane.api.fields import StrictSerializer, StringField, unknown_fields
from controlplane.validation import format_duration, parse_duration
from runtime import validation

NON_FIELD = api_settings.NON_FIELD_ERRORS_KEY


def field_paths(detail: Any, prefix: str = "") -> dict[str, list]:
    """DRF's nested error detail keyed by API field path: {"template": {"env": {0: {"name":
    [m]}}}} -> {"template.env[0].name": [m]}. A list's items by index; an object's own problems
    by its own path (the body's own as non_field_errors)."""
    if isinstance(detail, dict):
        steps: Any = detail.items()
    elif isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        steps = enumerate(detail)
    else:
        return {prefix or NON_FIELD: detail if isinstance(detail, list) else [detail]}
    flat: dict[str, list] = {}
    for step, inner in steps:
        if not inner:
            continue  # a list item without problems
        if step == NON_FIELD:
            path = prefix
        elif isinstance(step, int):
            path = f"{prefix}[{step}]"
        else:
            path = f"{prefix}.{step}" if prefix else str(step)
        for where, messages in field_paths(inner, path).items():
            flat.setdefault(where, []).extend(messages)
    return flat


_STEP = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def _nested(problems: dict[str, str], field: str) -> dict:
    """The rules' problems with `field`'s value, keyed by API path, nested as DRF nests the
    errors of what is below a field: {"template.env[0].name": m} -> {"env": {0: {"name":
    {NON_FIELD: [m]}}}}, so field_paths names them as they were named."""
    detail: dict = {}
    for path, message in problems.items():
        node = detail
        for index, key in _STEP.findall(path.removeprefix(field)):
            node = node.setdefault(int(index) if index else key, {})
        node.setdefault(NON_FIELD, []).append(message)
    return detail


class BodySerializer(StrictSerializer):
    """A request body or a part of one: unknown fields refused, and every problem keyed by
    its API field path (`template.ports[0].protocol`, `data.token`), however deep. Unknown
    fields are listed with the other fields' problems, so one answer names them all."""

    def to_internal_value(self, data: Any) -> Any:
        unknown = unknown_fields(data, self.fields)
        try:
            # Past StrictSerializer's check, which refuses unknown fields on their own.
            value = serializers.Serializer.to_internal_value(self, data)
        except serializers.ValidationError as exc:
            detail = exc.detail if isinstance(exc.detail, dict) else {NON_FIELD: exc.detail}
            raise serializers.ValidationError({**unknown, **detail}) from None
        if unknown:
            raise serializers.ValidationError(unknown)
        return value

    def run_validation(self, data: Any = empty) -> Any:
        try:
            return super().run_validation(data)
        except serializers.ValidationError as exc:
            raise serializers.ValidationError(field_paths(exc.detail)) from None


class IntegerField(serializers.IntegerField):
    """A JSON integer: never a string of digits, a fraction or a boolean (DRF's IntegerField
    takes "80", 80.0 and true)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class BooleanField(serializers.BooleanField):
    """true or false: never "yes", 1 or "on" (DRF's BooleanField takes those)."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class LowerCaseChoiceField(serializers.ChoiceField):
    """One of `choices`, in any case (`HTTPS` is https)."""

    def to_internal_value(self, data: Any) -> Any:
        return super().to_internal_value(data.lower() if isinstance(data, str) else data)


def _rule(value: Any, problem: str | None) -> Any:
    """`value`, or the rule's `problem` with it as the field's error."""
    if problem:
        raise serializers.ValidationError(problem)
    return value


def _text(**kwargs: Any) -> StringField:
    """A string kept as sent: an argument, a path or a name is not trimmed (DRF trims)."""
    return StringField(trim_whitespace=False, **kwargs)


class SecretRefSerializer(BodySerializer):
    """One key of one of the tenant's secrets (/secrets): the pod reads it from the Secret."""

    name = _text(max_length=validation.SECRET_NAME_MAX, help_text="a secret's name")
    key = _text(max_length=validation.SECRET_KEY_MAX, help_text="one of its keys")

    def validate_name(self, value: str) -> str:
        return _rule(value, validation.secret_name(value))

    def validate_key(self, value: str) -> str:
        return _rule(value, validation.secret_key(value))


class EnvVarSerializer(BodySerializer):
    """One environment variable of the unit's container: a value, or a secret's key (never
    both). A secret's value never enters the unit, only the reference."""

    name = _text(max_length=256, help_text="a C identifier-like name, e.g. HF_HOME")
    value = _text(required=False, allow_blank=True, max_length=validation.MAX_STRING)
    secretRef = SecretRefSerializer(required=False, help_text="instead of value")

    def validate_name(self, value: str) -> str:
        return _rule(value, validation.env_name(value))


def _strings(help_text: str) -> serializers.ListField:
    return serializers.ListField(
        child=_text(allow_blank=True, max_length=validation.MAX_STRING),
        required=False,
        max_length=validation.MAX_ITEMS,
        help_text=help_text,
    )


class PortSerializer(BodySerializer):
    """A port the unit's container listens on; with ports the unit gets a Service."""

    name = _text(
        max_length=15,
        error_messages={"max_length": validation.PORT_NAME_RULE},
        help_text="IANA service name, e.g. http",
    )
    port = IntegerField(
        min_value=1,
        max_value=65535,
        error_messages=dict.fromkeys(
            ("invalid", "min_value", "max_value", "max_string_length"), validation.PORT_NUMBER_RULE
        ),
    )
    protocol = serializers.ChoiceField(
        choices=validation.PROTOCOLS,
        default="TCP",
        required=False,
        error_messages={"invalid_choice": validation.PROTOCOL_RULE},
    )

    def validate_name(self, value: str) -> str:
        return _rule(value, validation.port_name(value))


class TemplateSerializer(BodySerializer):
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

    def validate(self, attrs: dict) -> dict:
        # Each value's own rules ran with its field; these are the rules across them.
        if problems := validation.template(attrs):
            raise serializers.ValidationError(_nested(problems, "template"))
        template = {key: attrs[key] for key in ("command", "args") if attrs.get(key)}
        if attrs.get("env"):
            # One spelling: a variable without a value has the empty one, as in the pod.
            template["env"] = [
                {"name": e["name"], "secretRef": dict(e["secretRef"])}
                if "secretRef" in e
                else {"name": e["name"], "value": e.get("value", "")}
                for e in attrs["env"]
            ]
        if attrs.get("ports"):
            template["ports"] = [
                {"name": p["name"], "port": p["port"], "protocol": p.get("protocol", "TCP")}
                for p in attrs["ports"]
            ]
        return template


class AccessSerializer(BodySerializer):
    """How the unit is reached: which port is primary and by what scheme (needs ports)."""

    # Checked against the template's ports by check_access, in the serializer that holds both.
    primaryPort = _text(required=False, help_text="a port's name; the first by default")
    # No default here: `access: {}` without ports is no access, `scheme` alone asks for one.
    scheme = LowerCaseChoiceField(
        choices=validation.SCHEMES,
        required=False,
        error_messages={"invalid_choice": validation.SCHEME_RULE},
        help_text="http when left out",
    )


class StorageMountSerializer(BodySerializer):
    """One of the tenant's storages, mounted into the unit's container."""

    name = _text(max_length=validation.STORAGE_NAME_MAX, help_text="a storage's name")
    mountPath = _text(
        max_length=1024,
        help_text="an absolute path, not / nor a system or reserved one (/proc, /sys, /dev, "
        "/etc/ssh-keys, ...)",
    )
    readOnly = BooleanField(default=False, required=False)


class StorageMountsField(serializers.ListField):
    """`storageMounts`: each mount as declared, then the rules across them (names, paths,
    duplicates), normalised (names lower-case, paths cleaned, sorted by name then path)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=StorageMountSerializer(), max_length=validation.MAX_MOUNTS, **kwargs)

    def to_internal_value(self, data: Any) -> list[dict]:
        mounts, problems = validation.storage_mounts(super().to_internal_value(data))
        if problems:
            raise serializers.ValidationError(_nested(problems, "storageMounts"))
        return mounts


class SSHSerializer(BodySerializer):
    """SSH into the unit with the tenant's registered keys (all of them unless named)."""

    enabled = BooleanField(required=False, help_text="false when left out")
    keys = serializers.ListField(
        child=_text(max_length=63),
        required=False,
        allow_null=True,
        max_length=validation.MAX_ITEMS,
        help_text="names from /ssh-keys; left out or null: every key the tenant has",
    )

    def validate(self, attrs: dict) -> dict:
        """{} when off; keys de-duplicated, None for every key."""
        normalised, problems = validation.ssh(attrs)
        if problems:
            raise serializers.ValidationError(_nested(problems, "ssh"))
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


class UnitSpecSerializer(BodySerializer):
    """A unit's changeable fields after an update's merge, checked as an order checks them."""

    image = StringField(max_length=validation.MAX_IMAGE)
    template = TemplateSerializer(required=False)
    access = AccessSerializer(required=False)
    storageMounts = StorageMountsField(required=False)
    ssh = SSHSerializer(required=False)
    stopAfter = DurationField(required=False, allow_blank=True)

    def validate_image(self, value: str) -> str:
        return check_image(value)

    def validate(self, attrs: dict) -> dict:
        return check_access(attrs)
