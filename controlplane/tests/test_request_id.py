"""Every answer names its request in X-Request-ID: the one a proxy or client sent when it is a
plain token, else a new one."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v1/gpu-units", "/accounts/login/"])
def test_every_answer_names_a_new_request_id(client, path, settings):
    settings.DASHBOARD_RATE_PER_ADDRESS = "1000000/min"
    first, second = client.get(path)["X-Request-ID"], client.get(path)["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", first)
    assert first != second


def test_a_sent_request_id_is_kept_when_it_is_a_plain_token(client):
    sent = "ingress-7f3a:01HZX"
    assert client.get("/api/v1/nope", HTTP_X_REQUEST_ID=sent)["X-Request-ID"] == sent


@pytest.mark.parametrize("sent", ["", "has space", "x" * 129, 'quote"d', "new\u2028line"])
def test_any_other_is_replaced(client, sent):
    answered = client.get("/api/v1/nope", HTTP_X_REQUEST_ID=sent)["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", answered)
