"""The dashboard is limited per client address (DASHBOARD_RATE_PER_ADDRESS): past the limit a
429 page with Retry-After, before the view runs. Other addresses, static files and the admin
are not held back, and without Redis nothing is."""

from __future__ import annotations

import ipaddress
import secrets
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
import yaml
from axes.models import AccessAttempt
from django.test import Client
from django.urls import reverse

from controlplane import ratelimit
from dashboard.tests.conftest import PASSWORD, client_for
from devstack.services import free_port

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
OVERVIEW = reverse("dashboard:overview")
LOGIN = reverse("dashboard:login")


def new_address() -> str:
    """An address no other test, nor an earlier run in the same window, has counted against."""
    return str(ipaddress.IPv4Address("10.0.0.0") + secrets.randbelow(2**24))


def held_at_noon(monkeypatch) -> None:
    """The limiter's clock held at noon (UTC) of today: its windows are whole UTC days, so a
    test run just before midnight would otherwise count its last requests in a new window."""
    noon = time.time() // 86400 * 86400 + 43200
    monkeypatch.setattr(ratelimit, "time", SimpleNamespace(time=lambda: noon))


@pytest.fixture
def limited(settings, monkeypatch):
    settings.DASHBOARD_RATE_PER_ADDRESS = "2/day"  # one window for the whole test
    held_at_noon(monkeypatch)


def test_pages_past_the_limit_are_a_429_page_with_retry_after(
    limited, member, django_assert_num_queries
):
    client = client_for(member, REMOTE_ADDR=new_address())
    assert [client.get(OVERVIEW).status_code for _ in range(2)] == [200, 200]

    # Refused before the session, the user or anything else is read.
    with django_assert_num_queries(0):
        refused = client.get(reverse("dashboard:unit-list"))

    assert refused.status_code == 429
    assert refused["Content-Type"].startswith("text/html")
    wait = int(refused["Retry-After"])
    assert 0 < wait <= 86400
    page = refused.content.decode()
    assert '<h1 id="throttled-heading">Too many requests</h1>' in page
    assert "at most 2 requests a day from one address" in page
    assert f"Try again in {wait} second" in page


def test_another_address_is_served_when_one_is_over_the_limit(limited, member):
    crowded = client_for(member, REMOTE_ADDR=new_address())
    for _ in range(3):
        crowded.get(OVERVIEW)
    assert crowded.get(OVERVIEW).status_code == 429
    assert client_for(member, REMOTE_ADDR=new_address()).get(OVERVIEW).status_code == 200


def test_the_login_page_counts_and_a_refused_login_is_not_tried(limited, member):
    client = Client(REMOTE_ADDR=new_address())
    assert [client.get(LOGIN).status_code for _ in range(2)] == [200, 200]

    refused = client.post(LOGIN, {"username": member.username, "password": PASSWORD})

    assert refused.status_code == 429
    assert "_auth_user_id" not in client.session
    # The password was never checked, so the login throttle has nothing to count either.
    assert not AccessAttempt.objects.filter(username=member.username).exists()


def test_forwarded_for_is_the_client_only_as_far_as_the_trusted_proxies(settings, limited):
    settings.LOGIN_TRUSTED_PROXIES = 1
    ingress, person = new_address(), new_address()

    def through_ingress(forwarded: str) -> int:
        return Client(REMOTE_ADDR=ingress, HTTP_X_FORWARDED_FOR=forwarded).get(LOGIN).status_code

    assert [through_ingress(person) for _ in range(2)] == [200, 200]
    # What the client sent left of the entry the ingress appended does not make it another.
    assert through_ingress(f"{new_address()}, {person}") == 429
    assert through_ingress(new_address()) == 200  # another person behind the same ingress

    # With no trusted proxy the header is the client's own word: the connection is counted.
    settings.LOGIN_TRUSTED_PROXIES = 0
    direct = new_address()
    answers = [
        Client(REMOTE_ADDR=direct, HTTP_X_FORWARDED_FOR=new_address()).get(LOGIN).status_code
        for _ in range(3)
    ]
    assert answers == [200, 200, 429]


def _liveness_probe() -> dict:
    documents = yaml.safe_load_all((ROOT / "k8s/control-plane/web.yaml").read_text())
    (web,) = (d for d in documents if d["kind"] == "Deployment")
    (container,) = web["spec"]["template"]["spec"]["containers"]
    return container["livenessProbe"]["httpGet"]


def test_static_files_and_the_admin_are_not_counted(settings, monkeypatch):
    settings.DASHBOARD_RATE_PER_ADDRESS = "1/day"
    held_at_noon(monkeypatch)
    probe = _liveness_probe()
    headers = {
        "HTTP_" + header["name"].upper().replace("-", "_"): header["value"]
        for header in probe["httpHeaders"]
    }
    client = Client(REMOTE_ADDR=new_address())
    # The liveness probe reads a static file: counting it would restart pods under load.
    assert [client.get(probe["path"], **headers).status_code for _ in range(3)] == [200] * 3
    assert [client.get(reverse("admin:login")).status_code for _ in range(3)] == [200] * 3
    # None of those counted: the dashboard's one request of the day is still there.
    assert client.get(LOGIN).status_code == 200
    assert client.get(LOGIN).status_code == 429


def test_the_dashboard_is_served_when_the_limiters_redis_is_gone(
    limited, member, monkeypatch, caplog
):
    # Built as the limiter builds its own (a client made otherwise retries for seconds).
    dead = redis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    monkeypatch.setattr(ratelimit, "_client", dead)
    client = client_for(member, REMOTE_ADDR=new_address())
    assert [client.get(OVERVIEW).status_code for _ in range(4)] == [200] * 4
    assert "rate limiter unavailable; request allowed" in caplog.text
