"""Webhook signing, address rules and the POST itself: fast tests, no database. Signatures
are verified with the standardwebhooks library, as a receiver would."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from inventory.models import Cluster
from tenancy import webhook_http
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

# The address checks read every registered cluster's ranges (the inventory's rows).
pytestmark = pytest.mark.django_db


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
    ["10.1.2.3", "192.168.0.1", "127.0.0.1", "100.64.0.1", "::1", "fd00::1"],
)
def test_private_addresses_are_refused_by_default(settings, address):
    settings.WEBHOOK_ALLOWED_NETWORKS = []
    assert "not a public address" in webhook_http.address_problem(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("64:ff9b::a00:1", "NAT64"),  # 10.0.0.1 behind the well-known NAT64 prefix
        ("64:ff9b::808:808", "NAT64"),  # even a public one: the address reached is not checked
        ("64:ff9b:1::1", "local-use NAT64"),
        ("::10.0.0.1", "IPv4-compatible"),
        ("::ffff:10.0.0.1", "IPv4-mapped"),
        ("::ffff:8.8.8.8", "IPv4-mapped"),
        ("fec0::1", "site-local"),
        ("2002:a00:1::1", "10.0.0.1, which is not a public address"),  # 6to4 of 10.0.0.1
        ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 of the metadata service
    ],
)
def test_special_ipv6_forms_are_refused_even_in_an_allowed_range(settings, address, said):
    """Issue 41, item 3: these passed as global."""
    settings.WEBHOOK_ALLOWED_NETWORKS = ["::/0"]
    assert said in webhook_http.address_problem(ipaddress.ip_address(address))


def test_a_6to4_address_of_a_public_one_passes(settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = []
    assert webhook_http.address_problem(ipaddress.ip_address("2002:808:808::1")) is None


def test_every_registered_cluster_s_ranges_are_refused(settings):
    """Issue 41, item 3: only the process's own cluster's ranges were refused."""
    settings.WEBHOOK_ALLOWED_NETWORKS = ["0.0.0.0/0"]
    Cluster.objects.create(
        name="far-away", region="far", pod_cidrs=["203.0.113.0/24"], node_cidrs=["10.9.0.0/16"]
    )
    assert "a cluster's own ranges" in webhook_http.address_problem(
        ipaddress.ip_address("203.0.113.7")
    )
    assert "a cluster's own ranges" in webhook_http.address_problem(
        ipaddress.ip_address("10.9.1.1")
    )
    assert webhook_http.address_problem(ipaddress.ip_address("198.51.100.7")) is None


@pytest.mark.parametrize(
    "url", ["https://x..com/hook", "https://" + "a" * 64 + ".com/", "https://./"]
)
def test_a_malformed_host_is_a_problem_not_an_exception(url):
    """Issue 41, item 3: `x..com` answered 500 (the IDNA codec raised)."""
    assert "not a valid DNS name" in webhook_http.url_problem(url)


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


def test_an_error_answer_is_not_delivered_and_an_allowed_private_answer_not_kept(receiver):
    """Issue 41, item 3: what a receiver in a range only ops allow says is not shown to the
    tenant (it would read an in-house service's answers); its status is."""
    _Receiver.answers = [500]
    answer = webhook_http.post(receiver, body=b"{}", headers={}, timeout=5)
    assert (answer.delivered, answer.status, answer.response) == (False, 500, "")


class _Drip(BaseHTTPRequestHandler):
    """A receiver that answers one byte every 0.2 s until `stopped`: each read is quick, the
    whole answer never comes."""

    stopped = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
        with contextlib.suppress(OSError):
            while not self.stopped.wait(0.2):
                self.wfile.write(b"X")
                self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


def test_a_dripping_receiver_is_cut_off_at_the_attempt_s_deadline(settings):
    """Issue 41, item 1: a byte every few seconds passed every per-read timeout."""
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    _Drip.stopped.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Drip)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        answer = webhook_http.post(
            f"http://127.0.0.1:{server.server_address[1]}/", body=b"{}", headers={}, timeout=1
        )
    finally:
        _Drip.stopped.set()
        server.shutdown()
        server.server_close()
    assert answer.status is None
    assert answer.error == "no whole answer within 1 s"


@pytest.fixture
def silent_name_server(settings):
    """A UDP name server that reads every question and answers none."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    settings.WEBHOOK_DNS_SERVERS = [f"127.0.0.1:{sock.getsockname()[1]}"]
    settings.WEBHOOK_DNS_TIMEOUT_SECONDS = 0.5
    yield sock
    sock.close()


def test_a_name_server_that_never_answers_is_given_up_at_the_deadline(silent_name_server):
    """Issue 41, item 2: the system resolver held the web thread for its own timeouts."""
    problem = webhook_http.target_problem("https://hooks.example.org/in")
    assert problem == "its host's name servers did not answer within 0.5 s"
    assert silent_name_server.recv(512)  # it was asked


def test_the_invalid_domain_names_nothing_without_a_question(silent_name_server):
    problem = webhook_http.target_problem("https://nowhere.invalid/in")
    assert "does not resolve" in problem


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


def test_a_webhook_naming_a_host_no_name_server_answers_for_is_a_400_at_the_deadline(
    silent_name_server,
):
    """Issue 41, item 2, through the API: the web thread that checks the URL returns at the
    deadline with a 400 naming it, instead of waiting on the system resolver's retries."""
    client = client_for(TenantFactory())
    answer = client.post(
        "/api/v1/webhooks",
        {"url": "https://hooks.example.org/in", "events": ["unit.phase_changed"]},
        format="json",
    )
    assert answer.status_code == 400
    assert "did not answer within 0.5 s" in json.dumps(answer.json()["error"])
    assert silent_name_server.recv(512)  # it was asked
