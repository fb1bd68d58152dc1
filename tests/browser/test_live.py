"""Live figures in a real browser: the overview and packages pages keep saying how old the
inventory is while they stay open, though the server answers their polls with 204 while no
figure moved."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.tests.conftest import make_user
from inventory.models import InventorySnapshot
from tenancy.tests.factories import TenantFactory
from tests.browser.conftest import log_in

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.long]


@pytest.mark.parametrize("path", ["/", "/packages/"])
def test_inventory_age_ticks_on_without_a_reload(page, live_server, path):
    from playwright.sync_api import expect

    log_in(page, make_user(TenantFactory()).username)
    # Written after signing in (a password hash and three page loads), so the page's first
    # render comes well within the 5-7 s the first expectation allows.
    InventorySnapshot.objects.create(
        pk=1, as_of=timezone.now() - timedelta(seconds=5), document="{}"
    )
    page.goto(path)
    age = page.locator(".freshness .sync-age")
    expect(age).to_have_text(re.compile(r"^[5-7] seconds ago$"))
    page.evaluate("window.loadedOnce = true")
    expect(age).to_have_text(re.compile(r"^(9|1\d) seconds ago$"), timeout=8_000)
    assert page.evaluate("window.loadedOnce") is True
