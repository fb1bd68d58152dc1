"""A new customer's first minutes in a real browser (issue 43): see a package's price before
ordering, order the README's web-server unit from the dashboard in one submit, make an API key
and use it with gpuctl. Screenshots at 1,366 and 400 px go to test-artifacts/."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from dashboard.tests.conftest import make_user
from inventory.sync import sync_inventory
from runtime.models import GPUUnit
from runtime.tests.helpers import remove_namespace_objects
from tenancy.tests.factories import TenantFactory
from tests.browser.conftest import ARTIFACTS, log_in

pytestmark = [
    pytest.mark.long,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker"),
]

WIDTHS = (1366, 400)


def shoot(page, name: str) -> None:
    """The page as a person sees it at each width, whole."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=ARTIFACTS / f"{name}-{width}.png", full_page=True)
    page.set_viewport_size({"width": WIDTHS[0], "height": 900})


def test_a_new_customer_orders_the_readmes_unit_and_uses_an_api_key_with_gpuctl(page, live_server):
    from playwright.sync_api import expect

    PackageFactory(article=True, price="1.20")
    tenant = TenantFactory()
    alice = make_user(tenant)
    sync_inventory()
    try:
        log_in(page, alice.username)

        # The price, before ordering: on the packages table and on the order form's card.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Packages").click()
        expect(page.locator("body")).to_contain_text("1.20")
        shoot(page, "customer-packages")
        page.get_by_role("link", name="New unit").click()
        card = page.get_by_role("radio", name=re.compile(ARTICLE_PACKAGE_ID))
        expect(page.locator("label", has=card)).to_contain_text("1.20")

        # The README's unit, in one submit: name and image first, its command and port.
        page.get_by_label("Name").fill("web-server")
        page.get_by_label("Image").fill("python:3.12")
        card.check()
        page.get_by_label("Command").fill("python -m http.server 8080")
        page.get_by_label("Ports").fill("http:8080")
        shoot(page, "customer-order")
        page.get_by_role("button", name="Order unit").click()
        expect(page.get_by_role("heading", name="Unit web-server")).to_be_visible()
        expect(page.locator("body")).to_contain_text("1.20")  # the unit page's Price row
        unit = GPUUnit.objects.get(tenant=tenant, name="web-server")
        assert unit.template["command"] == ["python", "-m", "http.server", "8080"]
        assert unit.template["ports"][0]["port"] == 8080

        # An API key of its own, shown once, then gpuctl with it.
        page.get_by_role("navigation", name="Main").get_by_role("link", name="API keys").click()
        page.get_by_label("Name").fill("laptop gpuctl")
        page.get_by_role("button", name="Make key").click()
        secret = page.locator("#shown-once-secret")
        expect(secret).to_contain_text("gcp_")
        key = secret.inner_text().strip()
        shoot(page, "customer-api-key")
        listed = subprocess.run(
            [sys.executable, "-m", "gpuctl", "units", "list", "-o", "json"],
            env={**os.environ, "GPUCTL_API_URL": live_server.url, "GPUCTL_API_KEY": key},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0, listed.stderr
        assert [u["name"] for u in json.loads(listed.stdout)] == ["web-server"]
        page.reload()
        expect(page.locator("body")).not_to_contain_text(key)  # never shown again
    finally:
        remove_namespace_objects(tenant.namespace)
