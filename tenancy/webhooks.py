"""Webhooks: a tenant's endpoints, the events they are sent, and their delivery.

`emit` is called by whoever makes an event (a unit's phase change in runtime, a budget alert in
billing, a volume's phase in runtime's storage), inside the transaction that makes it: it writes
one WebhookDelivery per subscribed endpoint (the outbox) and sends the delivery task after
commit. The task (`deliver`) posts the CloudEvent signed per Standard Webhooks, records the
attempt, and on anything but a 2xx tries again later (webhook_http.retry_delay) until
WEBHOOK_RETRY_FOR_SECONDS after the event; the sweeper resends what a lost message left due.
Deliveries sharing an ordering key (one unit's events) go one at a time, in order."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from controlplane import queues
from controlplane.errors import InvalidRequest, NotFound, Throttled
from tenancy import webhook_http
from tenancy.errors import LimitExceeded
from tenancy.models import (
    DeliveryStatus,
    Tenant,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)

logger = logging.getLogger(__name__)

DELIVER_TASK = "tenancy.deliver_webhook"
WEBHOOK_QUEUE = queues.WEBHOOKS
CLOUDEVENT_TYPE_PREFIX = "io.lokiwager.gpu."
ALL_EVENTS = "*"
TEST_EVENT = "webhook.test"
# Every event an endpoint may ask for, and what it says.
EVENT_TYPES: dict[str, str] = {
    "unit.phase_changed": "a unit moved to another phase (data: the unit, previousPhase)",
    "unit.auto_stopped": "a unit's stopAfter ran out and the control plane stopped it",
    "unit.device_unhealthy": "a unit's pod was evicted from a device that turned unhealthy",
    "unit.preempting": "an interruptible unit's devices are taken back for an on-demand unit: "
    "it is stopped at data.preemption.preemptAt",
    "unit.preemption_called_off": "the on-demand unit an interruptible unit was to give way for "
    "no longer waits: it keeps its devices",
    "budget.threshold_reached": "the month's spend reached 50, 80 or 100 % of the budget",
    "storage.phase_changed": "a volume moved to another phase (Pending, Bound, Lost, ...)",
}
# How long a delivery is the task's alone once claimed: longer than a send can take.
_LEASE = timedelta(seconds=60)  # at least: WEBHOOK_TIMEOUT_SECONDS + 30 s when that is longer
SWEEP_BATCH = 500
# The longest wait before a retry that is sent as a delayed task; longer ones, the sweeper.
COUNTDOWN_MAX = 60.0


def _events_problem(events: object) -> str | None:
    if not isinstance(events, list) or not events:
        return f'name one or more of {", ".join(EVENT_TYPES)}, or "*" for all.'
    unknown = [event for event in events if event != ALL_EVENTS and event not in EVENT_TYPES]
    if unknown:
        return f'unknown event {unknown[0]!r}: one of {", ".join(EVENT_TYPES)}, or "*".'
    return None


def _check(url: str | None, events: object | None) -> None:
    problems: dict[str, list[str]] = {}
    if url is not None and (problem := webhook_http.target_problem(url)):
        problems["url"] = [f"The URL {problem}."]
    if events is not None and (problem := _events_problem(events)):
        problems["events"] = [problem]
    if problems:
        raise InvalidRequest("The webhook is invalid.", details={"fields": problems})


def create_endpoint(
    *, tenant: Tenant, url: str, events: list[str], description: str = ""
) -> WebhookEndpoint:
    """A new endpoint with a new secret (the caller shows `secret` this once)."""
    _check(url, events)
    with transaction.atomic():
        Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
        held = WebhookEndpoint.objects.filter(tenant=tenant).count()
        if held >= settings.WEBHOOKS_PER_TENANT:
            raise LimitExceeded(
                f"tenant {tenant.slug} has {held} webhooks, the most it may have "
                f"({settings.WEBHOOKS_PER_TENANT}); delete one first.",
                details={"limit": "webhooks", "used": held, "hard": settings.WEBHOOKS_PER_TENANT},
            )
        return WebhookEndpoint.objects.create(
            tenant=tenant,
            url=url,
            events=sorted(set(events)),
            description=description,
            secret=webhook_http.new_secret(),
        )


def endpoint_of(tenant: Tenant, uid: str) -> WebhookEndpoint:
    try:
        key = uuid.UUID(uid)
    except ValueError:
        key = None
    endpoint = WebhookEndpoint.objects.filter(tenant=tenant, uid=key).first() if key else None
    if endpoint is None:
        raise NotFound(f"webhook {uid} not found.")
    return endpoint


def delete_endpoint(*, tenant: Tenant, uid: str) -> None:
    """Remove the webhook and its delivery log: nothing more is sent to it (404 if none)."""
    endpoint_of(tenant, uid).delete()


def update_endpoint(endpoint: WebhookEndpoint, changes: Mapping[str, Any]) -> WebhookEndpoint:
    """Change the URL, events, description or enabled; what is not given stays."""
    _check(changes.get("url"), changes.get("events"))
    for name in ("url", "description", "enabled"):
        if name in changes:
            setattr(endpoint, name, changes[name])
    if "events" in changes:
        endpoint.events = sorted(set(changes["events"]))
    endpoint.save()
    return endpoint


def rotate_secret(endpoint: WebhookEndpoint) -> WebhookEndpoint:
    """A new secret; the one before keeps signing beside it for the overlap."""
    endpoint.previous_secret = endpoint.secret
    endpoint.previous_secret_until = timezone.now() + timedelta(
        seconds=settings.WEBHOOK_SECRET_OVERLAP_SECONDS
    )
    endpoint.secret = webhook_http.new_secret()
    endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_until"])
    return endpoint


def signing_secrets(endpoint: WebhookEndpoint, *, now: datetime) -> list[str]:
    found = [endpoint.secret]
    if (
        endpoint.previous_secret
        and endpoint.previous_secret_until is not None
        and endpoint.previous_secret_until > now
    ):
        found.append(endpoint.previous_secret)
    return found


def cloudevent(
    event_type: str, *, event_id: uuid.UUID, subject: str, data: Mapping[str, Any], time: datetime
) -> dict[str, Any]:
    """A CloudEvents 1.0 structured event, as the usage export and the audit log write them."""
    return {
        "specversion": "1.0",
        "id": str(event_id),
        "source": settings.WEBHOOK_EVENT_SOURCE,
        "type": CLOUDEVENT_TYPE_PREFIX + event_type,
        "subject": subject,
        "time": time.isoformat().replace("+00:00", "Z"),
        "datacontenttype": "application/json",
        "data": dict(data),
    }


def emit(
    tenant_id: int,
    event_type: str,
    *,
    subject: str,
    data: Mapping[str, Any],
    ordering_key: str = "",
    time: datetime | None = None,
    event_id: uuid.UUID | None = None,
) -> int:
    """Queue `event_type` for every enabled endpoint of the tenant that asked for it, in the
    caller's transaction (nothing is sent for an event rolled back). One read when no
    endpoint asked; returns how many deliveries were queued."""
    assert event_type in EVENT_TYPES, event_type
    endpoints = list(
        WebhookEndpoint.objects.filter(tenant_id=tenant_id, enabled=True)
        .filter(Q(events__contains=[event_type]) | Q(events__contains=[ALL_EVENTS]))
        .values_list("pk", flat=True)
    )
    if not endpoints:
        return 0
    now = timezone.now()
    event_id = uuid.uuid4()
    payload = cloudevent(
        event_type, event_id=event_id, subject=subject, data=data, time=time or now
    )
    return len(_queue(endpoints, event_type, event_id, payload, ordering_key, now))


def send_test(endpoint: WebhookEndpoint) -> WebhookDelivery:
    """A `webhook.test` event to this endpoint alone, whatever it subscribes to; one at a
    time per endpoint (429 while the last one is still being delivered), so test deliveries
    cannot pile up against a slow receiver."""
    now = timezone.now()
    if WebhookDelivery.objects.filter(
        endpoint=endpoint, event_type=TEST_EVENT, status=DeliveryStatus.PENDING
    ).exists():
        raise Throttled(
            "a test delivery to this webhook is still being delivered: see its deliveries, and "
            "send another once it has ended.",
            retry_after=max(int(settings.WEBHOOK_TIMEOUT_SECONDS), 1),
        )
    event_id = uuid.uuid4()
    payload = cloudevent(
        TEST_EVENT,
        event_id=event_id,
        subject=f"webhooks/{endpoint.uid}",
        data={"webhook": str(endpoint.uid), "message": "A test delivery."},
        time=now,
    )
    with transaction.atomic():
        return _queue([endpoint.pk], TEST_EVENT, event_id, payload, "", now)[0]


def _queue(
    endpoints: list[int],
    event_type: str,
    event_id: uuid.UUID,
    payload: dict[str, Any],
    ordering_key: str,
    now: datetime,
) -> list[WebhookDelivery]:
    rows = WebhookDelivery.objects.bulk_create(
        [
            WebhookDelivery(
                endpoint_id=pk,
                event_id=event_id,
                event_type=event_type,
                ordering_key=ordering_key,
                payload=payload,
                created_at=now,
                next_attempt_at=now,
            )
            for pk in endpoints
        ]
    )
    ids = [row.pk for row in rows]

    def send_all() -> None:
        for pk in ids:
            send(pk)

    transaction.on_commit(send_all)
    return rows


def send(delivery_id: int, *, countdown: float = 0) -> None:
    """Hand one delivery to a worker (the sweeper sends it again if this is lost). A try due
    later than COUNTDOWN_MAX is left to the sweeper: a Redis broker hands a task held that long
    to another worker again (its visibility timeout), and a worker holds it in memory."""
    if countdown > COUNTDOWN_MAX:
        return
    try:
        current_app.send_task(
            DELIVER_TASK,
            args=[delivery_id],
            queue=WEBHOOK_QUEUE,
            countdown=countdown or None,
            retry=False,
        )
    except Exception:  # the broker away: the sweeper sends it once it is back
        logger.warning("webhook delivery %s not sent; the sweeper will", delivery_id, exc_info=True)


def _claim(delivery_id: int, now: datetime) -> WebhookDelivery | None:
    """Take the delivery for one attempt if it is due, nobody holds it and no earlier one of
    its ordering key is pending (compare-and-set on the lease)."""
    claimed = WebhookDelivery.objects.filter(
        Q(leased_until__isnull=True) | Q(leased_until__lt=now),
        pk=delivery_id,
        status=DeliveryStatus.PENDING,
        next_attempt_at__lte=now,
    ).update(
        leased_until=now + max(_LEASE, timedelta(seconds=settings.WEBHOOK_TIMEOUT_SECONDS + 30))
    )
    if not claimed:
        return None
    delivery = WebhookDelivery.objects.select_related("endpoint").get(pk=delivery_id)
    if (
        delivery.ordering_key
        and _earlier_pending(delivery.endpoint_id, delivery.ordering_key, delivery.pk).exists()
    ):
        # Its turn comes when the earlier one ends (finish sends the next).
        WebhookDelivery.objects.filter(pk=delivery_id).update(leased_until=None)
        return None
    return delivery


def _earlier_pending(endpoint_id: Any, ordering_key: Any, before: Any) -> Any:
    """The pending deliveries of one endpoint and unit made before `before` (a delivery's id):
    while there is one, that delivery waits. Values, or OuterRefs for a subquery."""
    return WebhookDelivery.objects.filter(
        endpoint_id=endpoint_id,
        ordering_key=ordering_key,
        status=DeliveryStatus.PENDING,
        id__lt=before,
    )


def _given_up(delivery: WebhookDelivery, now: datetime) -> str:
    """Why a delivery is not tried again, however its last attempt ended (answered, timed
    out, or cut off with its worker): too old, or tried too often. "" while it may be."""
    if delivery.attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
        return f"gave up after {delivery.attempts} attempts"
    if now >= delivery.created_at + timedelta(seconds=settings.WEBHOOK_RETRY_FOR_SECONDS):
        return f"gave up: not delivered within {settings.WEBHOOK_RETRY_FOR_SECONDS:g} s"
    return ""


def deliver(delivery_id: int) -> str:
    """One attempt at a delivery: what became of it (for the task's log and tests). The
    attempt is counted, and recorded as unfinished, before the request goes out, so one its
    worker never finished still counts toward giving up."""
    now = timezone.now()
    delivery = _claim(delivery_id, now)
    if delivery is None:
        return "not due"
    endpoint = delivery.endpoint
    if not endpoint.enabled:
        _finish(delivery, DeliveryStatus.FAILED, error="the webhook is disabled", now=now)
        return DeliveryStatus.FAILED
    if why := _given_up(delivery, now):
        _finish(delivery, DeliveryStatus.FAILED, error=why, now=now)
        return DeliveryStatus.FAILED
    attempts = delivery.attempts + 1
    WebhookDelivery.objects.filter(pk=delivery.pk).update(attempts=attempts)
    attempt = WebhookAttempt.objects.create(
        delivery=delivery,
        at=now,
        status=None,
        error="the attempt did not end (its worker stopped)",
        duration_ms=0,
        response="",
    )
    body = json.dumps(delivery.payload, separators=(",", ":")).encode()
    headers = webhook_http.signed_headers(
        signing_secrets(endpoint, now=now),
        message_id=delivery.message_id,
        timestamp=int(now.timestamp()),
        body=body,
    )
    answer = webhook_http.post(
        endpoint.url, body=body, headers=headers, timeout=settings.WEBHOOK_TIMEOUT_SECONDS
    )
    ended = timezone.now()
    WebhookAttempt.objects.filter(pk=attempt.pk).update(
        status=answer.status,
        error=answer.error,
        duration_ms=answer.duration_ms,
        response=answer.response,
    )
    if answer.delivered:
        _finish(delivery, DeliveryStatus.SUCCEEDED, answer=answer, attempts=attempts, now=ended)
        return DeliveryStatus.SUCCEEDED
    delay = webhook_http.retry_delay(attempts)
    give_up_at = delivery.created_at + timedelta(seconds=settings.WEBHOOK_RETRY_FOR_SECONDS)
    if attempts >= settings.WEBHOOK_MAX_ATTEMPTS or ended + timedelta(seconds=delay) > give_up_at:
        _finish(delivery, DeliveryStatus.FAILED, answer=answer, attempts=attempts, now=ended)
        return DeliveryStatus.FAILED
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        next_attempt_at=ended + timedelta(seconds=delay),
        leased_until=None,
        last_status=answer.status,
        last_error=answer.error,
    )
    send(delivery.pk, countdown=delay)
    return "retrying"


def _finish(
    delivery: WebhookDelivery,
    status: str,
    *,
    now: datetime,
    answer: webhook_http.Answer | None = None,
    attempts: int | None = None,
    error: str = "",
) -> None:
    """End the delivery and start the next one of its ordering key."""
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=status,
        attempts=delivery.attempts if attempts is None else attempts,
        finished_at=now,
        leased_until=None,
        last_status=answer.status if answer else None,
        last_error=answer.error if answer else error,
    )
    if delivery.ordering_key:
        following = (
            WebhookDelivery.objects.filter(
                endpoint_id=delivery.endpoint_id,
                ordering_key=delivery.ordering_key,
                status=DeliveryStatus.PENDING,
                id__gt=delivery.pk,
            )
            .order_by("id")
            .values_list("pk", "next_attempt_at")
            .first()
        )
        if following is not None:
            wait = (following[1] - timezone.now()).total_seconds()
            send(following[0], countdown=max(wait, 0))


def sweep(*, now: datetime | None = None) -> int:
    """Send again what is due and held by nobody (a lost message, a worker that died with the
    lease), and drop deliveries older than the retention. Returns how many were sent."""
    now = now or timezone.now()
    # A delivery waiting for an earlier one of its unit is started by that one's end.
    waiting = _earlier_pending(OuterRef("endpoint_id"), OuterRef("ordering_key"), OuterRef("id"))
    due = list(
        WebhookDelivery.objects.filter(
            Q(leased_until__isnull=True) | Q(leased_until__lt=now),
            Q(ordering_key="") | ~Exists(waiting),
            status=DeliveryStatus.PENDING,
            next_attempt_at__lte=now - timedelta(seconds=5),
        )
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:SWEEP_BATCH]
    )
    for pk in due:
        send(pk)
    cutoff = now - timedelta(days=settings.WEBHOOK_DELIVERY_RETENTION_DAYS)
    WebhookDelivery.objects.filter(created_at__lt=cutoff).exclude(
        status=DeliveryStatus.PENDING
    ).delete()
    return len(due)
