"""Webhooks over the stack: a real worker signs and posts each event to a receiver on this
machine, which verifies it with the standardwebhooks library as a customer's would. A unit's
phases arrive in order; a receiver that fails is tried again with back-off, and nothing
later for that unit overtakes the event it refused; a rotated secret signs beside the old."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import redis
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from catalog.tests.factories import PackageFactory
from inventory.sync import sync_inventory
from runtime.control import preemption
from runtime.tests.helpers import (
    l40s_package,
    order_unit,
    remove_namespace_objects,
    wait_for_phase,
    wait_until,
)
from tenancy import webhooks
from tenancy.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


@dataclass
class Received:
    webhook_id: str
    headers: dict[str, str]
    body: bytes
    status: int
    at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def event(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A webhook receiver: answers 500 to the first `failures` requests, then 204."""

    url: str = ""
    failures: int = 0
    log: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self) -> list[Received]:
        with self.lock:
            return [request for request in self.log if request.status == 204]


@pytest.fixture
def receiver(settings) -> Iterator[Receiver]:
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the worker's: conftest.start_worker
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {name.lower(): value for name, value in self.headers.items()}
            with state.lock:
                status = 500 if state.failures > 0 else 204
                state.failures -= 1
                state.log.append(Received(headers["webhook-id"], headers, body, status))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def _cleanup(tenant, cluster):
    yield
    remove_namespace_objects(tenant.namespace)


def subscribe(client, url: str, events: list[str]) -> dict:
    response = client.post("/api/v1/webhooks", {"url": url, "events": events}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["data"]


def phases_of(received: list[Received]) -> list[tuple[str, str]]:
    return [(r.event["data"]["previousPhase"], r.event["data"]["phase"]) for r in received]


def test_a_units_phases_arrive_signed_and_in_order(tenant, receiver):
    client = client_for(tenant)
    hook = subscribe(client, receiver.url, ["unit.phase_changed"])
    unit = order_unit(client, "hooked", PackageFactory().id)
    wait_for_phase(unit, "Running")
    stopped = client.post("/api/v1/gpu-units/hooked/stop", {"operationID": "s1"}, format="json")
    assert stopped.status_code == 202, stopped.json()
    wait_for_phase(unit, "Stopped")

    received = wait_until(
        lambda: (
            (got := receiver.delivered()) and got[-1].event["data"]["phase"] == "Stopped" and got
        ),
        "the Stopped event",
    )
    verifier = Webhook(hook["secret"])
    for request in received:
        assert verifier.verify(request.body, request.headers) == request.event
        event = request.event
        assert event["specversion"] == "1.0"
        assert event["type"] == "io.lokiwager.gpu.unit.phase_changed"
        assert event["subject"] == "units/hooked"
        assert request.webhook_id == "msg_" + event["id"].replace("-", "")
        assert event["data"]["uid"] == str(unit.uid)
        assert request.headers["content-type"] == "application/cloudevents+json"
    phases = phases_of(received)
    # Each event starts where the one before ended: none missing, none out of order.
    assert all(before[1] == after[0] for before, after in itertools.pairwise(phases)), phases
    seen = [phase for _, phase in phases]
    assert seen.index("Provisioning") < seen.index("Running") < seen.index("Stopped"), seen
    assert len({r.webhook_id for r in received}) == len(received)

    deliveries = client.get(f"/api/v1/webhooks/{hook['id']}/deliveries", {"limit": 100})
    rows = deliveries.json()["data"]
    assert {row["status"] for row in rows} == {"succeeded"}
    assert sorted(row["webhookId"] for row in rows) == sorted(r.webhook_id for r in received)
    assert all(row["attemptLog"][0]["status"] == 204 for row in rows)


def test_a_failing_receiver_is_retried_with_back_off_and_nothing_overtakes(tenant, receiver):
    receiver.failures = 2
    client = client_for(tenant)
    hook = subscribe(client, receiver.url, ["unit.phase_changed"])
    unit = order_unit(client, "retried", PackageFactory().id)
    wait_for_phase(unit, "Running")
    received = wait_until(
        lambda: (
            (got := receiver.delivered()) and got[-1].event["data"]["phase"] == "Running" and got
        ),
        "the Running event",
    )
    first = receiver.log[0].webhook_id
    # The first event was refused twice and then taken; until it was, nothing else was sent.
    assert [(r.webhook_id, r.status) for r in receiver.log[:3]] == [
        (first, 500),
        (first, 500),
        (first, 204),
    ]
    assert received[0].webhook_id == first
    phases = phases_of(received)
    assert all(before[1] == after[0] for before, after in itertools.pairwise(phases)), phases

    rows = client.get(f"/api/v1/webhooks/{hook['id']}/deliveries", {"limit": 100}).json()["data"]
    retried = next(row for row in rows if row["webhookId"] == first)
    assert retried["status"] == "succeeded"
    assert retried["attempts"] == 3
    log = retried["attemptLog"]
    assert [attempt["status"] for attempt in log] == [500, 500, 204]
    assert log[0]["error"] == "not 2xx"
    # Back-off: the worker's first delay is 0.5 s, tripled for the next (conftest).
    gaps = [
        _seconds_between(log[0]["at"], log[1]["at"]),
        _seconds_between(log[1]["at"], log[2]["at"]),
    ]
    assert gaps[0] >= 0.5, gaps
    assert gaps[1] >= 1.5, gaps


def test_a_test_delivery_verifies_with_both_secrets_after_a_rotation(tenant, receiver):
    client = client_for(tenant)
    hook = subscribe(client, receiver.url, ["budget.threshold_reached"])
    assert client.post(f"/api/v1/webhooks/{hook['id']}/test").status_code == 202
    first = wait_until(receiver.delivered, "the test delivery")[0]
    assert Webhook(hook["secret"]).verify(first.body, first.headers)["type"] == (
        "io.lokiwager.gpu.webhook.test"
    )
    rotated = client.post(f"/api/v1/webhooks/{hook['id']}/rotate-secret").json()["data"]
    assert client.post(f"/api/v1/webhooks/{hook['id']}/test").status_code == 202
    second = wait_until(lambda: receiver.delivered()[1:], "the second test delivery")[0]
    for secret in (rotated["secret"], hook["secret"]):
        assert Webhook(secret).verify(second.body, second.headers)["data"]["webhook"] == hook["id"]


def _seconds_between(earlier: str, later: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def test_a_preemption_notice_arrives_before_the_preemption(tenant, receiver, settings):
    """An interruptible unit's owner hears of its preemption (unit.preempting) within its
    notice, before preemptAt: the point of giving notice."""
    settings.PREEMPTION_WAIT_SECONDS = 0
    spot = l40s_package(
        "l40s-4x-spot",
        4,
        price="4.00",
        interruptible=True,
        interruptible_price="1.00",
        preemption_notice_seconds=60,
    )
    whole = l40s_package("l40s-4x", 4)
    other = TenantFactory()
    client, other_client = client_for(tenant), client_for(other)
    hook = subscribe(client, receiver.url, ["unit.preempting"])
    try:
        for name in ("spot-a", "spot-b"):  # the node's 8 L40S
            wait_for_phase(order_unit(client, name, spot.id, interruptible=True), "Running")
        sync_inventory()
        waiting = order_unit(other_client, "needs-l40s", whole.id)
        wait_for_phase(waiting, "Pending", reason="NoMatchingDevices")
        assert preemption.give_notice(now=timezone.now()) == 1
        (request,) = wait_until(receiver.delivered, "the unit.preempting event")
        event = Webhook(hook["secret"]).verify(request.body, request.headers)
        assert event["type"] == "io.lokiwager.gpu.unit.preempting"
        assert event["data"]["name"] == "spot-b"  # the younger
        notice = event["data"]["preemption"]
        assert notice["reason"] == "CapacityReclaimed"
        assert request.at < datetime.fromisoformat(notice["preemptAt"])
    finally:
        remove_namespace_objects(other.namespace)


def test_dripping_receivers_and_twenty_test_deliveries_do_not_hold_a_units_work(tenant, settings):
    """Issue 41, item 1: deliveries shared the workers with provisioning; four receivers that
    drip a byte at a time held the fleet. Now they have workers of their own: twenty test
    deliveries to dripping receivers are all in flight or waiting on the webhooks queue, none
    on the default one, and a unit ordered meanwhile runs while they still hang."""
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the worker's: conftest.start_worker
    stop = threading.Event()

    class Drip(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            while not stop.is_set():
                try:
                    self.wfile.write(b"X")
                    self.wfile.flush()
                except OSError:
                    return
                stop.wait(0.5)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    tenants = [TenantFactory(), TenantFactory()]
    try:
        hooks = [
            webhooks.create_endpoint(tenant=owner, url=f"{url}/{i}", events=["unit.phase_changed"])
            for owner in tenants
            for i in range(10)
        ]
        sent = [webhooks.send_test(hook) for hook in hooks]
        broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        wait_until(
            lambda: WebhookAttempt.objects.filter(delivery__in=sent).count() >= 4,
            "the webhook worker to be held by four dripping receivers",
        )
        assert broker.llen("celery") == 0  # nothing of theirs waits where units' work does

        unit = wait_for_phase(
            order_unit(client_for(tenant), "busy-hooks", PackageFactory().id), "Running"
        )

        pending = WebhookDelivery.objects.filter(pk__in=[d.pk for d in sent], status="pending")
        assert pending.count() == len(sent)  # every one still hangs, or waits its turn
        assert unit.phase == "Running"
    finally:
        stop.set()
        WebhookEndpoint.objects.filter(tenant__in=tenants).update(enabled=False)
        server.shutdown()
        server.server_close()
        remove_namespace_objects(tenant.namespace)
