"""API shapes of what a tenant owns besides units: its SSH keys, and its audit log."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api.fields import Moment, StrictSerializer, StringField
from controlplane.api.pagination import PageQuerySerializer
from tenancy import sshkeys
from tenancy.models import AuditActorKind, AuditEvent, AuditOutcome, AuditSource, SSHKey

# The CloudEvents `type` of an audit event (the usage export's is io.lokiwager.gpu.usage).
AUDIT_CLOUDEVENT_TYPE = "io.lokiwager.gpu.audit"
AUDIT_FORMATS = ("json", "cloudevents")


class CreateSSHKeySerializer(StrictSerializer):
    """Register a public key once; units with `ssh.enabled` get it (or the ones they name)."""

    name = StringField(max_length=63, help_text="a DNS label naming the key, e.g. laptop")
    publicKey = StringField(
        max_length=sshkeys.MAX_TEXT,
        trim_whitespace=False,
        help_text="one OpenSSH public key line: ed25519, ECDSA or RSA of at least 3072 bits",
    )


class SSHKeySerializer(serializers.ModelSerializer):
    publicKey = serializers.CharField(source="public_key")
    createdAt = serializers.DateTimeField(source="created_at")

    class Meta:
        model = SSHKey
        fields = ["name", "kind", "bits", "fingerprint", "comment", "publicKey", "createdAt"]


class AuditActorSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        source="actor_kind", choices=AuditActorKind.choices, help_text="api_key or user"
    )
    name = serializers.CharField(source="actor", help_text="the API key's prefix, or a username")


class AuditTargetSerializer(serializers.Serializer):
    kind = serializers.CharField(
        source="target_kind", help_text="the resource (units, ssh_keys, tenancy.apikey, ...)"
    )
    name = serializers.CharField(
        source="target_name", help_text="its name or id, when the write names one"
    )


class AuditEventSerializer(serializers.Serializer):
    """One write as the audit log keeps it: never a body."""

    id = serializers.UUIDField(source="uid")
    occurredAt = serializers.DateTimeField(source="occurred_at")
    # A field named as DRF's Field.source attribute (the metaclass takes it off the class).
    source = serializers.ChoiceField(choices=AuditSource.choices)  # type: ignore[assignment]
    actor = AuditActorSerializer(source="*")
    tenant = serializers.SerializerMethodField(help_text="the tenant acted for (its slug)")
    action = serializers.CharField(
        help_text="the API's operationId (the dashboard's writes use the same), or "
        "<app>.<model>.<verb> for the admin's"
    )
    target = AuditTargetSerializer(source="*")
    method = serializers.CharField()
    path = serializers.CharField()
    status = serializers.IntegerField(help_text="the HTTP status answered")
    outcome = serializers.ChoiceField(choices=AuditOutcome.choices)
    errorCode = serializers.CharField(source="error_code", help_text="the API error's code")
    requestId = serializers.CharField(source="request_id", help_text="as in X-Request-ID")
    remoteAddress = serializers.IPAddressField(source="remote_address", allow_null=True)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_tenant(self, event: AuditEvent) -> str | None:
        return event.tenant_slug or None


def audit_cloudevent(event: AuditEvent, *, source: str) -> dict[str, Any]:
    """The event as a CloudEvents 1.0 structured event, as the usage export writes its rows:
    `source` + `id` is unique, `subject` the tenant, `data` the API's JSON of the event."""
    cloudevent: dict[str, Any] = {
        "specversion": "1.0",
        "id": str(event.uid),
        "source": source,
        "type": AUDIT_CLOUDEVENT_TYPE,
    }
    if event.tenant_slug:
        cloudevent["subject"] = event.tenant_slug
    data = AuditEventSerializer(event).data
    return {
        **cloudevent,
        "time": data["occurredAt"],
        "datacontenttype": "application/json",
        "data": data,
    }


class AuditEventQuerySerializer(PageQuerySerializer):
    """Query parameters of GET /audit-events: filters, each exact, and the page."""

    action = serializers.RegexField(
        r"^[A-Za-z0-9_.:-]{1,100}$",
        required=False,
        help_text="e.g. units_create (API and dashboard), tenancy.apikey.add (admin)",
    )
    target = serializers.RegexField(
        r"^[^/]{1,100}(/.{1,255})?$",
        required=False,
        help_text="a resource (units), or one of them (units/my-unit)",
    )
    actor = serializers.CharField(
        max_length=150, required=False, help_text="an API key's prefix, or a username"
    )
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=AuditSource.choices, required=False
    )
    outcome = serializers.ChoiceField(choices=AuditOutcome.choices, required=False)
    requestId = serializers.CharField(max_length=128, required=False)
    from_ = Moment(required=False, help_text="occurred at or after")
    to = Moment(required=False, help_text="occurred before")
    format = serializers.ChoiceField(
        choices=AUDIT_FORMATS,
        default="json",
        help_text="cloudevents: the page as CloudEvents, one JSON text per line "
        '(application/x-ndjson); the next page is in the Link header (rel="next")',
    )

    def get_fields(self) -> dict:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")  # a Python keyword
        return fields

    def validate(self, attrs: dict) -> dict:
        start, end = attrs.get("from"), attrs.get("to")
        if start is not None and end is not None and start >= end:
            raise serializers.ValidationError({"to": ["to must be after from."]})
        kind, _, name = attrs.get("target", "").partition("/")
        return {**attrs, "target_kind": kind, "target_name": name}


class OperatorAuditEventQuerySerializer(AuditEventQuerySerializer):
    """Query parameters of GET /operator/audit-events: those of a tenant's, and the tenant."""

    tenant = serializers.RegexField(
        r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", required=False, help_text="a tenant's slug"
    )
