"""API shapes of what a tenant owns besides units: its SSH keys, and its audit log."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.api.fields import Moment, StrictSerializer, StringField
from controlplane.api.pagination import PageQuerySerializer
from tenancy import sshkeys
from tenancy.models import (
    AuditActorKind,
    AuditEvent,
    AuditOutcome,
    AuditSource,
    DeliveryStatus,
    SSHKey,
    WebhookDelivery,
)
from tenancy.selectors import OPERATOR
from tenancy.webhooks import EVENT_TYPES

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
        source="actor_kind",
        choices=[*AuditActorKind.choices, (OPERATOR, OPERATOR)],
        help_text="api_key or user; in a tenant's own log, operator for the platform's staff "
        "(who, and from where, is the operator log's)",
    )
    name = serializers.CharField(
        source="actor", help_text="the API key's prefix, or a username (operator: operator)"
    )


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


class TenantAuditEventSerializer(AuditEventSerializer):
    """An event as its tenant reads it: what the platform's staff did for it (in the admin,
    or in the dashboard acting for it) is the operator's, with no name or address. The
    context's `operators`: the staff usernames among the page's actors."""

    def to_representation(self, instance: AuditEvent) -> dict[str, Any]:
        data = super().to_representation(instance)
        by_staff = instance.actor_kind == AuditActorKind.USER and (
            instance.source == AuditSource.ADMIN
            or instance.actor in self.context.get("operators", ())
        )
        if by_staff:
            data["actor"] = {"kind": OPERATOR, "name": OPERATOR}
            data["remoteAddress"] = None
        return data


def audit_cloudevent(
    event: AuditEvent,
    *,
    source: str,
    serializer: type[AuditEventSerializer] | None = None,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
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
    data = (serializer or AuditEventSerializer)(event, context=context or {}).data
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
        max_length=150,
        required=False,
        help_text="an API key's prefix, or a username (in a tenant's own log: operator for "
        "the platform's staff, whose usernames match nothing there)",
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


_EVENT_HELP = "events to send: " + ", ".join(EVENT_TYPES) + ', or "*" for every one'


class CreateWebhookSerializer(StrictSerializer):
    """A new webhook: where to send which events. The answer carries its signing secret,
    shown this once."""

    url = StringField(
        max_length=2048,
        help_text="an https:// URL at a public address (ops may allow private ranges)",
    )
    events = serializers.ListField(
        child=StringField(max_length=64), min_length=1, max_length=32, help_text=_EVENT_HELP
    )
    description = StringField(max_length=200, required=False, allow_blank=True, default="")


class UpdateWebhookSerializer(StrictSerializer):
    """What a PATCH may change; what it leaves out stays."""

    url = StringField(max_length=2048, required=False)
    events = serializers.ListField(
        child=StringField(max_length=64),
        min_length=1,
        max_length=32,
        required=False,
        help_text=_EVENT_HELP,
    )
    description = StringField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(
        required=False,
        help_text="false: nothing more is sent (pending deliveries fail, new events are "
        "not kept) until true",
    )


class WebhookSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uid")
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField())
    description = serializers.CharField()
    enabled = serializers.BooleanField()
    previousSecretValidUntil = serializers.DateTimeField(
        source="previous_secret_until",
        allow_null=True,
        help_text="after a rotation: until when the previous secret also signs",
    )
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")


class WebhookWithSecretSerializer(WebhookSerializer):
    secret = serializers.CharField(
        help_text="the signing secret (whsec_...), shown only in this answer: keep it"
    )


class WebhookAttemptSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    status = serializers.IntegerField(allow_null=True, help_text="the receiver's HTTP status")
    error = serializers.CharField(help_text="why it did not count as delivered")
    durationMs = serializers.IntegerField(source="duration_ms")
    response = serializers.CharField(help_text="the start of the receiver's answer")


class WebhookDeliverySerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uid")
    webhookId = serializers.CharField(source="message_id", help_text="the webhook-id header")
    eventType = serializers.CharField(source="event_type")
    status = serializers.ChoiceField(choices=DeliveryStatus.choices)
    attempts = serializers.IntegerField()
    createdAt = serializers.DateTimeField(source="created_at")
    nextAttemptAt = serializers.SerializerMethodField(help_text="when pending: the next try")
    finishedAt = serializers.DateTimeField(source="finished_at", allow_null=True)
    lastStatus = serializers.IntegerField(source="last_status", allow_null=True)
    lastError = serializers.CharField(source="last_error")
    payload = serializers.JSONField(help_text="the CloudEvent sent")
    attemptLog = WebhookAttemptSerializer(
        source="attempt_log.all", many=True, help_text="each try, oldest first"
    )

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_nextAttemptAt(self, delivery: WebhookDelivery) -> str | None:
        if delivery.status != DeliveryStatus.PENDING:
            return None
        return serializers.DateTimeField().to_representation(delivery.next_attempt_at)


class WebhookDeliveryQuerySerializer(PageQuerySerializer):
    status = serializers.ChoiceField(choices=DeliveryStatus.choices, required=False)
    eventType = serializers.CharField(max_length=64, required=False)
