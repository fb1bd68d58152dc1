"""Failed logins lock an account at the address they came from, and that address; never the
account everywhere: only an operator locks an account at every address (lock_account)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

pytestmark = pytest.mark.django_db

PASSWORD = "a-correct-horse-battery-staple"
LOGIN = reverse("dashboard:login")
ADMIN_LOGIN = reverse("admin:login")
OVERVIEW = reverse("dashboard:overview")
LIMIT = 3
ATTACKER, OWNER, THIRD = "203.0.113.7", "198.51.100.9", "192.0.2.44"


@pytest.fixture(autouse=True)
def failure_limit(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT


@pytest.fixture
def admin_user():
    return get_user_model().objects.create_superuser("admin", password=PASSWORD)


def log_in(address: str, username: str = "admin", password: str = PASSWORD, url: str = LOGIN):
    return Client(REMOTE_ADDR=address).post(url, {"username": username, "password": password})


def signed_in(response) -> bool:
    return "_auth_user_id" in response.wsgi_request.session


def lock_from(address: str, username: str = "admin") -> None:
    for _ in range(LIMIT):
        log_in(address, username, "wrong")


def test_wrong_passwords_lock_the_account_at_their_address_and_that_address_only(admin_user):
    lock_from(ATTACKER)

    # The right password, from the address that guessed: the lockout page, as before.
    refused = log_in(ATTACKER)
    assert refused.status_code == 429
    assert not signed_in(refused)
    assert refused["Content-Type"].startswith("text/html")
    page = refused.content.decode()
    assert "Too many failed logins" in page
    assert f"after {LIMIT} wrong" in page
    assert "Try again in 15 minutes" in page
    # That address is locked for every account, not only the one it guessed at.
    assert log_in(ATTACKER, "somebody-else", "anything").status_code == 429

    # The owner, at another address, is not held back by it.
    for url in (LOGIN, ADMIN_LOGIN):
        response = log_in(OWNER, url=url)
        assert response.status_code == 302
        assert signed_in(response)


def test_a_third_address_can_still_try_when_an_attacker_locked_theirs(admin_user):
    lock_from(ATTACKER)

    answer = log_in(THIRD, password="wrong")
    assert answer.status_code == 200  # the form again, with its error: not the lockout page
    assert "Too many failed logins" not in answer.content.decode()
    assert log_in(THIRD).status_code == 302


def test_failing_again_during_a_lock_does_not_make_it_longer(admin_user, settings):
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        lock_from(ATTACKER)
        # The attacker keeps trying through the lock, till a minute before it ends.
        for minutes in (1, 5, 10, 14):
            clock.move_to(start + timedelta(minutes=minutes))
            assert log_in(ATTACKER, password="wrong").status_code == 429

        clock.move_to(start + settings.AXES_COOLOFF_TIME + timedelta(seconds=1))
        assert log_in(ATTACKER).status_code == 302


def test_an_operator_lock_refuses_the_account_at_every_address(admin_user):
    session = Client(REMOTE_ADDR=OWNER)
    session.force_login(admin_user)
    assert session.get(OVERVIEW).status_code == 200

    call_command("lock_account", "admin")

    for address in (ATTACKER, OWNER, THIRD):
        for url in (LOGIN, ADMIN_LOGIN):
            response = log_in(address, url=url)
            assert response.status_code == 200  # the form again
            assert not signed_in(response)
    # A session opened before the lock ends with it.
    assert session.get(OVERVIEW).status_code == 302

    call_command("unlock_account", "admin")
    assert signed_in(log_in(THIRD))


def test_locking_an_unknown_account_is_an_error():
    with pytest.raises(CommandError, match="no account 'nobody'"):
        call_command("lock_account", "nobody")
    with pytest.raises(CommandError, match="no account 'nobody'"):
        call_command("unlock_account", "nobody")
