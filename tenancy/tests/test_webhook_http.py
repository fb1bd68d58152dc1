"""Webhook signing, address rules and the POST itself: fast tests, no database. Signatures
are verified with the standardwebhooks library, as a receiver would."""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tenancy import webhook_http


def _headers(secrets: list[str], body: bytes) -> dict[str, str]:
    return webhook_http.signed_headers(
        secrets, message_id="msg_abc", timestamp=int(time.time()), body=body
    )


def test_a_signature_verifies_with_the_standard_webhooks_library():
    secret = webhook_http.new_secret()
    body = json.dumps({"type": "io.lokiwager.gpu.unit.phase_changed"}).encode()
    headers = _headers([secret], body)
    assert headers["webhook-id"] == "msg_abc"
    assert Webhook(secret).verify(body, headers) == {"type": "io.lokiwager.gpu.unit.phase_changed"}


def test_a_changed_body_or_another_secret_does_not_verify():
    secret = webhook_http.new_secret()
    headers = _headers([secret], b'{"a":1}')
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(b'{"a":2}', headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(webhook_http.new_secret()).verify(b'{"a":1}', headers)


def test_during_a_rotation_both_secrets_verify():
    old, new = webhook_http.new_secret(), webhook_http.new_secret()
    body = b'{"a":1}'
    headers = _headers([new, old], body)
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert Webhook(new).verify(body, headers) == {"a": 1}
    assert Webhook(old).verify(body, headers) == {"a": 1}


def test_secrets_are_standard_webhooks_secrets():
    first, second = webhook_http.new_secret(), webhook_http.new_secret()
    assert first.startswith("whsec_")
    assert first != second
    Webhook(first)  # the library parses it


@pytest.mark.parametrize(
    "address",
    ["10.1.2.3", "192.168.0.1", "127.0.0.1", "100.64.0.1", "::1", "fd00::1", "::ffff:10.0.0.1"],
)
def test_private_addresses_are_refused_by_default(settings, address):
    settings.WEBHOOK_ALLOWED_NETWORKS = []
    assert "not a public address" in webhook_http.address_problem(ipaddress.ip_address(address))


def test_public_addresses_pass(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = []
    for address in ("8.8.8.8", "2606:4700:4700::1111"):
        assert webhook_http.address_problem(ipaddress.ip_address(address)) is None


def test_metadata_and_the_clusters_ranges_are_refused_even_when_allowed(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["0.0.0.0/0", "::/0"]
    settings.CLUSTER_POD_CIDRS = ["10.244.0.0/16"]
    settings.CLUSTER_SERVICE_CIDRS = ["203.0.113.0/24"]
    problem = webhook_http.address_problem
    assert "link-local" in problem(ipaddress.ip_address("169.254.169.254"))
    assert "link-local" in problem(ipaddress.ip_address("fe80::1"))
    assert "cluster" in problem(ipaddress.ip_address("10.244.3.4"))
    assert "cluster" in problem(ipaddress.ip_address("203.0.113.9"))
    assert problem(ipaddress.ip_address("10.9.0.1")) is None
    assert "not a host" in problem(ipaddress.ip_address("0.0.0.0"))


def test_an_allowed_range_lets_private_receivers_in(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["10.20.0.0/16"]
    assert webhook_http.address_problem(ipaddress.ip_address("10.20.1.1")) is None
    assert webhook_http.address_problem(ipaddress.ip_address("10.21.1.1")) is not None


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ftp://example.com/x", "https://"),
        ("https://", "no host"),
        ("https://user:pw@example.com/", "user or password"),
        ("https://example.com/#x", "fragment"),
        ("https://example.com:99999/", "not a URL"),
    ],
)
def test_urls_that_cannot_be_targets(url, said):
    assert said in webhook_http.url_problem(url)


def test_a_name_resolving_to_a_private_address_is_refused(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = []
    assert "not a public address" in webhook_http.target_problem("https://localhost/hook")


def test_retries_triple_up_to_the_cap(settings):
    settings.WEBHOOK_RETRY_FIRST_SECONDS = 5
    settings.WEBHOOK_RETRY_MAX_SECONDS = 600
    assert [webhook_http.retry_delay(n) for n in range(1, 7)] == [5, 15, 45, 135, 405, 600]


class _Receiver(BaseHTTPRequestHandler):
    answers: list[int] = []
    seen: list[tuple[str, dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = {name.lower(): value for name, value in self.headers.items()}
        type(self).seen.append((self.path, headers, body))
        status = type(self).answers.pop(0) if type(self).answers else 204
        self.send_response(status)
        if status in (301, 302):
            self.send_header("Location", "http://169.254.169.254/latest/meta-data")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    _Receiver.answers, _Receiver.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://localhost:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_post_sends_the_body_signed_and_reads_the_answer(receiver):
    secret = webhook_http.new_secret()
    body = b'{"id":"1"}'
    answer = webhook_http.post(
        f"{receiver}/hook?x=1", body=body, headers=_headers([secret], body), timeout=5
    )
    assert answer.delivered
    assert answer.status == 204
    path, headers, received = _Receiver.seen[0]
    assert path == "/hook?x=1"
    assert received == body
    assert headers["host"] == receiver.removeprefix("http://")
    assert Webhook(secret).verify(received, headers) == {"id": "1"}


def test_a_redirect_is_not_followed(receiver):
    _Receiver.answers = [302]
    answer = webhook_http.post(receiver, body=b"{}", headers={}, timeout=5)
    assert not answer.delivered
    assert answer.status == 302
    assert "redirect" in answer.error
    assert len(_Receiver.seen) == 1


def test_an_error_answer_is_not_delivered(receiver):
    _Receiver.answers = [500]
    answer = webhook_http.post(receiver, body=b"{}", headers={}, timeout=5)
    assert (answer.delivered, answer.status, answer.response) == (False, 500, "ok")


def test_nothing_is_sent_to_a_refused_address(receiver, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = []
    answer = webhook_http.post(receiver, body=b"{}", headers={}, timeout=5)
    assert answer.status is None
    assert answer.error.startswith("refused:")
    assert _Receiver.seen == []


def test_a_closed_port_is_an_error_not_an_exception(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    answer = webhook_http.post("http://127.0.0.1:1/", body=b"{}", headers={}, timeout=2)
    assert answer.status is None
    assert answer.error
