"""The webhooks API: the secret shown once, what a URL may be (no SSRF), events checked, the
per-tenant cap, rotation, a test delivery queued, and each endpoint's statement count. The
deliveries themselves, over a real worker: tests/test_webhooks.py."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from tenancy import webhooks
from tenancy.models import WebhookDelivery, WebhookEndpoint
from tenancy.tests.factories import TenantFactory
from tests.endpoints import EndpointTest, client_for

pytestmark = pytest.mark.django_db

RECEIVER = "http://127.0.0.1:9/hook"


@pytest.fixture(autouse=True)
def _local_receivers(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]


def _create(client, **body):
    return client.post(
        "/api/v1/webhooks",
        {"url": RECEIVER, "events": ["unit.phase_changed"], **body},
        format="json",
    )


@pytest.fixture
def client(tenant):
    made = client_for(tenant)
    made.get("/api/v1/webhooks")  # the key's first use of the minute stamps it
    return made


class TestCreate(EndpointTest):
    method, path = "post", "/api/v1/webhooks"

    def test_the_secret_is_shown_once(self, client, tenant):
        data = self.get_success_response(
            client, status=201, data={"url": RECEIVER, "events": ["*"], "description": "ci"}
        ).json()["data"]
        assert data["secret"].startswith("whsec_")
        assert (data["url"], data["events"], data["enabled"]) == (RECEIVER, ["*"], True)
        shown = client.get(f"/api/v1/webhooks/{data['id']}").json()["data"]
        assert "secret" not in shown
        assert all("secret" not in row for row in client.get("/api/v1/webhooks").json()["data"])
        assert WebhookEndpoint.objects.get(tenant=tenant).secret == data["secret"]

    def test_statement_count(self, client):
        self.assert_statement_count(client, data={"url": RECEIVER, "events": ["*"]})

    @pytest.mark.parametrize(
        ("url", "said"),
        [
            ("http://169.254.169.254/latest/meta-data", "link-local"),
            ("http://10.0.0.1/hook", "not a public address"),
            ("http://[::1]/hook", "not a public address"),
            ("http://localhost.localdomain.invalid/hook", "does not resolve"),
            ("file:///etc/passwd", "https://"),
        ],
    )
    def test_private_and_unusable_urls_are_refused(self, client, tenant, url, said):
        error = self.get_error_response(
            client, status=400, code="invalid_request", data={"url": url, "events": ["*"]}
        )
        assert said in error["details"]["fields"]["url"][0]
        assert not WebhookEndpoint.objects.filter(tenant=tenant).exists()

    def test_unknown_events_are_refused(self, client):
        error = self.get_error_response(
            client, status=400, code="invalid_request", data={"url": RECEIVER, "events": ["x"]}
        )
        assert "unknown event 'x'" in error["details"]["fields"]["events"][0]
        self.get_error_response(
            client, status=400, code="invalid_request", data={"url": RECEIVER, "events": []}
        )

    def test_a_tenant_has_at_most_the_cap(self, client, settings):
        settings.WEBHOOKS_PER_TENANT = 1
        self.get_success_response(client, status=201, data={"url": RECEIVER, "events": ["*"]})
        error = self.get_error_response(
            client, status=409, code="limit_exceeded", data={"url": RECEIVER, "events": ["*"]}
        )
        assert error["details"] == {"limit": "webhooks", "used": 1, "hard": 1}


class TestList(EndpointTest):
    path = "/api/v1/webhooks"

    def test_only_the_tenants_own(self, client):
        mine = _create(client).json()["data"]["id"]
        _create(client_for(TenantFactory()))
        listed = self.get_success_response(client).json()
        assert [row["id"] for row in listed["data"]] == [mine]
        assert listed["meta"] == {"nextCursor": None}

    def test_statement_count(self, client):
        _create(client)
        self.assert_statement_count(client)


class TestDetail(EndpointTest):
    path = "/api/v1/webhooks/{id}"

    def test_another_tenants_or_no_webhook_is_not_found(self, client):
        theirs = _create(client_for(TenantFactory())).json()["data"]["id"]
        for missing in (theirs, str(uuid.uuid4()), "not-a-uuid"):
            self.get_error_response(client, status=404, code="not_found", id=missing)

    def test_statement_count(self, client):
        self.assert_statement_count(client, id=_create(client).json()["data"]["id"])


class TestUpdate(EndpointTest):
    method, path = "patch", "/api/v1/webhooks/{id}"

    def test_what_is_not_given_stays(self, client):
        made = _create(client, description="first").json()["data"]
        data = self.get_success_response(
            client, id=made["id"], data={"enabled": False, "events": ["budget.threshold_reached"]}
        ).json()["data"]
        assert (data["enabled"], data["events"]) == (False, ["budget.threshold_reached"])
        assert (data["url"], data["description"]) == (RECEIVER, "first")
        self.get_error_response(
            client,
            status=400,
            code="invalid_request",
            id=made["id"],
            data={"url": "http://192.168.1.1/"},
        )
        self.get_error_response(
            client, status=400, code="invalid_request", id=made["id"], data={"secret": "x"}
        )

    def test_statement_count(self, client):
        made = _create(client).json()["data"]["id"]
        self.assert_statement_count(client, id=made, data={"description": "b"})


class TestDelete(EndpointTest):
    method, path = "delete", "/api/v1/webhooks/{id}"

    def test_it_goes_with_its_deliveries(self, client, tenant):
        made = _create(client).json()["data"]["id"]
        client.post(f"/api/v1/webhooks/{made}/test")
        response = self.call(client, id=made)
        assert response.status_code == 204
        assert not WebhookEndpoint.objects.filter(tenant=tenant).exists()
        assert not WebhookDelivery.objects.exists()
        self.get_error_response(client, status=404, code="not_found", id=made)

    def test_statement_count(self, client):
        made = _create(client).json()["data"]["id"]
        self.assert_statement_count(client, id=made)


class TestRotateSecret(EndpointTest):
    method, path = "post", "/api/v1/webhooks/{id}/rotate-secret"

    def test_a_new_secret_and_the_old_one_for_the_overlap(self, client, tenant, settings):
        settings.WEBHOOK_SECRET_OVERLAP_SECONDS = 3600
        made = _create(client).json()["data"]
        rotated = self.get_success_response(client, id=made["id"]).json()["data"]
        assert rotated["secret"].startswith("whsec_")
        assert rotated["secret"] != made["secret"]
        assert rotated["previousSecretValidUntil"] is not None
        endpoint = WebhookEndpoint.objects.get(tenant=tenant)
        assert (endpoint.secret, endpoint.previous_secret) == (rotated["secret"], made["secret"])

    def test_statement_count(self, client):
        self.assert_statement_count(client, id=_create(client).json()["data"]["id"])


class TestSendTest(EndpointTest):
    method, path = "post", "/api/v1/webhooks/{id}/test"

    def test_a_test_event_is_queued_for_this_webhook(self, client):
        made = _create(client).json()["data"]["id"]
        data = self.get_success_response(client, status=202, id=made).json()["data"]
        assert (data["eventType"], data["status"], data["attempts"]) == (
            "webhook.test",
            "pending",
            0,
        )
        assert data["payload"]["type"] == "io.lokiwager.gpu.webhook.test"
        assert data["payload"]["specversion"] == "1.0"
        assert data["webhookId"] == "msg_" + uuid.UUID(data["payload"]["id"]).hex

    def test_one_test_delivery_at_a_time_per_webhook(self, client):
        """Issue 41, item 1: test deliveries piled up against a slow receiver."""
        made = _create(client).json()["data"]["id"]
        first = self.get_success_response(client, status=202, id=made).json()["data"]["id"]
        error = self.get_error_response(client, status=429, code="throttled", id=made)
        assert error["details"]["retryAfter"] >= 1
        # Once it ended (delivered or given up), another may go.
        WebhookDelivery.objects.filter(uid=first).update(status="failed")
        self.get_success_response(client, status=202, id=made)

    def test_statement_count(self, client):
        self.assert_statement_count(client, id=_create(client).json()["data"]["id"])


class TestDeliveries(EndpointTest):
    path = "/api/v1/webhooks/{id}/deliveries"

    def test_newest_first_and_filtered(self, client):
        made = _create(client).json()["data"]["id"]
        first = client.post(f"/api/v1/webhooks/{made}/test").json()["data"]["id"]
        WebhookDelivery.objects.filter(uid=first).update(status="failed")  # one at a time
        second = client.post(f"/api/v1/webhooks/{made}/test").json()["data"]["id"]
        listed = self.get_success_response(client, id=made, query={"limit": 1}).json()
        assert [row["id"] for row in listed["data"]] == [second]
        following = self.get_success_response(
            client, id=made, query={"limit": 1, "cursor": listed["meta"]["nextCursor"]}
        ).json()
        assert [row["id"] for row in following["data"]] == [first]
        assert (
            self.get_success_response(client, id=made, query={"status": "succeeded"}).json()["data"]
            == []
        )

    def test_statement_count(self, client):
        made = _create(client).json()["data"]["id"]
        client.post(f"/api/v1/webhooks/{made}/test")
        self.assert_statement_count(client, id=made)


def test_the_sweeper_resends_what_is_due_and_free_and_not_waiting(tenant, monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr(webhooks, "send", lambda pk, countdown=0: sent.append(pk))
    hook = webhooks.create_endpoint(tenant=tenant, url=RECEIVER, events=["*"])
    data = {"phase": "Running"}
    for _ in range(2):  # a unit's two events: the second waits for the first
        webhooks.emit(
            tenant.pk, "unit.phase_changed", subject="units/a", data=data, ordering_key="unit:a"
        )
    webhooks.emit(tenant.pk, "budget.threshold_reached", subject="budget", data={})
    leased = webhooks.send_test(hook)
    WebhookDelivery.objects.filter(pk=leased.pk).update(
        leased_until=timezone.now() + timedelta(minutes=1)
    )
    first, second, budget = WebhookDelivery.objects.exclude(pk=leased.pk).order_by("id")
    later = timezone.now() + timedelta(seconds=10)
    assert webhooks.sweep(now=later) == 2
    assert sorted(sent) == sorted([first.pk, budget.pk])  # not the second, not the leased
    assert second.ordering_key == first.ordering_key
    # Not yet due (a retry's back-off) is not sent either.
    WebhookDelivery.objects.filter(pk=budget.pk).update(next_attempt_at=later + timedelta(hours=1))
    sent.clear()
    assert webhooks.sweep(now=later) == 1
    assert sent == [first.pk]


def test_an_attempt_counts_before_it_is_sent_and_the_give_up_holds_however_it_ended(
    tenant, monkeypatch, settings
):
    """Issue 41, item 1: an attempt cut off with its worker (a task time limit, a killed
    process) was never recorded, so the sweeper sent it again forever. Now it counts from its
    start, and a delivery past its attempts or its age ends failed, unsent."""
    settings.WEBHOOK_MAX_ATTEMPTS = 3
    monkeypatch.setattr(webhooks, "send", lambda pk, countdown=0: None)
    posted: list[str] = []

    def killed(url: str, **_kwargs: object) -> None:
        posted.append(url)
        raise SystemExit("the worker stopped mid-attempt")

    monkeypatch.setattr(webhooks.webhook_http, "post", killed)
    hook = webhooks.create_endpoint(tenant=tenant, url=RECEIVER, events=["*"])
    delivery = webhooks.send_test(hook)
    for expected in (1, 2, 3):
        with pytest.raises(SystemExit):
            webhooks.deliver(delivery.pk)
        delivery.refresh_from_db()
        assert delivery.attempts == expected
        # Its lease runs out; the sweeper hands it to a worker again.
        WebhookDelivery.objects.filter(pk=delivery.pk).update(leased_until=None)
    assert [a.error for a in delivery.attempt_log.all()] == [
        "the attempt did not end (its worker stopped)"
    ] * 3
    assert webhooks.deliver(delivery.pk) == "failed"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.last_error) == ("failed", "gave up after 3 attempts")
    assert len(posted) == 3  # not a fourth time

    # Past its age, the same, whatever its attempts.
    old = webhooks.send_test(hook)
    WebhookDelivery.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.WEBHOOK_RETRY_FOR_SECONDS + 1)
    )
    assert webhooks.deliver(old.pk) == "failed"
    old.refresh_from_db()
    assert old.last_error.startswith("gave up: not delivered within")
    assert len(posted) == 3
