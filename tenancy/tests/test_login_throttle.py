"""Logins to the dashboard and the admin are throttled per account at a client address and per
address."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from controlplane.ratelimit import client_address

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "a-correct-horse-battery-staple"
DASHBOARD_LOGIN = reverse("dashboard:login")
ADMIN_LOGIN = reverse("admin:login")


@pytest.fixture(autouse=True)
def failure_limit(settings):
    settings.AXES_FAILURE_LIMIT = 3
    return 3


@pytest.fixture
def user():
    return get_user_model().objects.create_user("alice", password=PASSWORD, is_staff=True)


def log_in(url: str, username: str, password: str, address: str = "203.0.113.7"):
    return Client(REMOTE_ADDR=address).post(url, {"username": username, "password": password})


def test_dashboard_login_is_refused_with_a_readable_page_when_failing_too_often_there(user):
    answers = [log_in(DASHBOARD_LOGIN, "alice", "wrong").status_code for _ in range(2)]
    assert answers == [200, 200]  # the form again, with its error

    locked = log_in(DASHBOARD_LOGIN, "alice", "wrong")
    assert locked.status_code == 429
    assert locked["Content-Type"].startswith("text/html")
    page = locked.content.decode()
    assert "Too many failed logins" in page
    assert "after 3 wrong" in page
    assert "Try again in 15 minutes" in page
    assert reverse("dashboard:login") in page  # a way back, in the dashboard's own layout

    # The right password does not get through the lock from this address (other addresses:
    # test_login_throttling).
    response = log_in(DASHBOARD_LOGIN, "alice", PASSWORD)
    assert response.status_code == 429
    assert "_auth_user_id" not in response.wsgi_request.session


def test_login_is_refused_when_one_address_failed_too_often_for_any_accounts(user):
    for username in ("bob", "carol", "dave"):
        log_in(DASHBOARD_LOGIN, username, "wrong")

    assert log_in(DASHBOARD_LOGIN, "alice", PASSWORD).status_code == 429
    # Another address is not held back by this one's failures.
    assert log_in(DASHBOARD_LOGIN, "alice", PASSWORD, "198.51.100.9").status_code == 302


def test_admin_login_is_refused_with_an_admin_page_when_failing_too_often_there(user):
    for _ in range(2):
        assert log_in(ADMIN_LOGIN, "alice", "wrong").status_code == 200

    locked = log_in(ADMIN_LOGIN, "alice", "wrong")
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Too many failed logins" in page
    assert "Try again in 15 minutes" in page
    assert "GPU control plane" in page
    assert 'id="site-name"' in page
    assert log_in(ADMIN_LOGIN, "alice", PASSWORD).status_code == 429


def test_login_succeeds_when_failures_stay_under_the_limit(user):
    log_in(DASHBOARD_LOGIN, "alice", "wrong")
    log_in(DASHBOARD_LOGIN, "alice", "wrong")
    assert log_in(DASHBOARD_LOGIN, "alice", PASSWORD).status_code == 302


def test_client_address_is_the_one_the_outermost_trusted_proxy_saw(settings, rf):
    forwarded = {"REMOTE_ADDR": "10.0.0.5", "HTTP_X_FORWARDED_FOR": "1.2.3.4, 203.0.113.7"}
    settings.LOGIN_TRUSTED_PROXIES = 0
    assert client_address(rf.post("/", **forwarded)) == "10.0.0.5"
    settings.LOGIN_TRUSTED_PROXIES = 1
    # The left entry is whatever the client sent; the ingress appended the right one.
    assert client_address(rf.post("/", **forwarded)) == "203.0.113.7"
    settings.LOGIN_TRUSTED_PROXIES = 2
    settings.LOGIN_PROXY_NETWORKS = ["10.0.0.0/8", "203.0.113.0/24"]  # both proxies' ranges
    assert client_address(rf.post("/", **forwarded)) == "1.2.3.4"
    settings.LOGIN_TRUSTED_PROXIES = 3  # did not come through all of them: trust none
    assert client_address(rf.post("/", **forwarded)) == "10.0.0.5"


def test_each_client_behind_the_proxy_is_throttled_apart(settings, user):
    settings.LOGIN_TRUSTED_PROXIES = 1

    def through_ingress(username, password, client):
        return Client(REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR=client).post(
            DASHBOARD_LOGIN, {"username": username, "password": password}
        )

    for username in ("bob", "carol", "dave"):
        through_ingress(username, "wrong", "203.0.113.7")
    assert through_ingress("alice", PASSWORD, "203.0.113.7").status_code == 429
    assert through_ingress("alice", PASSWORD, "198.51.100.9").status_code == 302


def test_limits_come_from_the_environment():
    env = {**os.environ, "LOGIN_FAILURE_LIMIT": "7", "LOGIN_LOCKOUT_MINUTES": "2.5"}
    env["LOGIN_TRUSTED_PROXIES"] = "2"
    script = (
        "from django.conf import settings as s; "
        "print(s.AXES_FAILURE_LIMIT, s.AXES_COOLOFF_TIME.total_seconds(), s.LOGIN_TRUSTED_PROXIES)"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.splitlines()[-1].split() == ["7", "150.0", "2"], result.stderr


def test_addresses_of_one_ipv6_64_are_one_client(settings, user):
    """Issue 41, item 4: rotating addresses inside one /64 gave unlimited guesses."""
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in(DASHBOARD_LOGIN, "alice", "wrong", address=f"2001:db8:7:7::{i + 1:x}")
    assert (
        log_in(DASHBOARD_LOGIN, "alice", PASSWORD, address="2001:db8:7:7::ffff").status_code == 429
    )
    assert log_in(ADMIN_LOGIN, "alice", PASSWORD, address="2001:db8:7:7:1::9").status_code == 429
    # Another /64 is another client.
    assert log_in(DASHBOARD_LOGIN, "alice", PASSWORD, address="2001:db8:7:8::1").status_code == 302


def test_a_forwarded_address_is_believed_only_from_a_proxy_network(settings, rf):
    """Issue 41, item 4: with a proxy configured, a client that reached web directly chose its
    own address in X-Forwarded-For."""
    settings.LOGIN_TRUSTED_PROXIES = 1
    settings.LOGIN_PROXY_NETWORKS = ["10.0.0.0/8"]
    spoofed = {"REMOTE_ADDR": "198.51.100.4", "HTTP_X_FORWARDED_FOR": "203.0.113.99"}
    assert client_address(rf.post("/", **spoofed)) == "198.51.100.4"
    through = {"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "203.0.113.99"}
    assert client_address(rf.post("/", **through)) == "203.0.113.99"
    # Two hops: the inner one must be a proxy too, or it is the client.
    settings.LOGIN_TRUSTED_PROXIES = 2
    chain = {"REMOTE_ADDR": "10.1.2.3", "HTTP_X_FORWARDED_FOR": "1.2.3.4, 198.51.100.4"}
    assert client_address(rf.post("/", **chain)) == "198.51.100.4"
