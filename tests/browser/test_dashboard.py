"""The dashboard in a real browser (Debian's Chromium, headless, driven by Playwright) against
the live server, a real Celery worker and the simulated cluster: order a unit, watch it turn
Running without reloading, inspect it, delete it, and stay inside one's own tenant."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from django.db import connections

from catalog.tests.factories import PackageFactory
from dashboard.tests.conftest import make_unit, make_user
from inventory.sync import sync_inventory
from runtime import reconcile
from runtime.tests.helpers import remove_namespace_objects
from tenancy.tests.factories import TenantFactory
from tests.browser.conftest import ARTIFACTS, log_in

SLOW = 30_000  # ms: provisioning or teardown through the worker and the cluster

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker"),
]


@pytest.fixture
def beat() -> Iterator[SimpleNamespace]:
    """What Celery beat does in production: reconcile units and mirror the cluster, here from
    a thread, so the browser watches the pages change on their own. It starts paused:
    `beat.resume()` once the page that should see the change is open."""
    stop, go = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            go.wait()
            while not stop.is_set():
                reconcile.reconcile_units()
                sync_inventory()
                stop.wait(0.3)
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="beat", daemon=True)
    thread.start()
    yield SimpleNamespace(resume=go.set)
    stop.set()
    go.set()
    thread.join(timeout=20)
    if failures:
        raise failures[0]


def test_order_watch_inspect_and_delete_a_unit(page, beat, live_server):
    from playwright.sync_api import expect

    package = PackageFactory(article=True)
    tenant = TenantFactory()
    stranger = TenantFactory()
    make_unit(stranger, "strangers-unit")
    alice = make_user(tenant)
    sync_inventory()
    try:
        log_in(page, alice.username)

        ARTIFACTS.mkdir(exist_ok=True)
        page.get_by_role("link", name="New unit").click()
        page.get_by_role("radio", name=re.compile(package.id)).check()
        page.get_by_label("Name").fill("Not_A_Name")
        page.get_by_label("Image").fill("python:3.12")
        page.get_by_role("button", name="Order unit").click()
        expect(page.get_by_role("alert")).to_contain_text("The unit was not ordered")
        expect(page.get_by_label("Name")).to_have_attribute("aria-invalid", "true")
        page.screenshot(path=ARTIFACTS / "new-unit-errors.png", full_page=True)
        page.get_by_role("link", name="Name", exact=True).click()
        expect(page.get_by_label("Name")).to_be_focused()
        page.get_by_label("Name").fill("browser-demo")
        page.get_by_role("button", name="Order unit").click()
        expect(page.get_by_role("heading", name="Unit browser-demo")).to_be_visible()

        page.get_by_role("navigation", name="Main").get_by_role("link", name="Units").click()
        row = page.locator('tr[data-unit="browser-demo"]')
        expect(row).to_have_count(1)
        # Anything the page keeps in memory survives only if the page is never reloaded.
        page.evaluate("window.loadedOnce = true")
        expect(row.locator(".phase")).not_to_have_text("Running")
        beat.resume()  # the unit can only reach Running from here on, while the page is open
        expect(row.locator(".phase")).to_have_text("Running", timeout=SLOW)
        assert page.evaluate("window.loadedOnce") is True
        expect(row).to_contain_text("gpu-rtx3080-2x-cpu10-mem40g")
        expect(page.locator("#units-announce")).to_contain_text("Running")
        expect(page.locator('tr[data-unit="strangers-unit"]')).to_have_count(0)
        page.screenshot(path=ARTIFACTS / "units.png", full_page=True)

        row.get_by_role("link", name="browser-demo").click()
        expect(page.get_by_role("heading", name="Unit browser-demo")).to_be_visible()
        expect(page.locator("table.devices tbody tr")).to_have_count(2)
        timeline = page.locator("ol.timeline")
        for reason in ("Accepted", "Provisioned", "Allocated", "Running"):
            expect(timeline).to_contain_text(reason)
        expect(page.get_by_text("unit-browser-demo-gpu").first).to_be_visible()
        page.screenshot(path=ARTIFACTS / "unit-detail.png", full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        page.screenshot(path=ARTIFACTS / "unit-detail-phone.png", full_page=True)
        page.set_viewport_size({"width": 1280, "height": 900})
        detail_url = page.url

        page.get_by_role("link", name="Overview").click()
        # A customer sees its own usage; the cluster's allocation over time is for ops.
        expect(page.get_by_role("heading", name="Your usage")).to_be_visible()
        expect(page.get_by_role("region", name="Your GPUs by device class")).to_contain_text(
            "nvidia-rtx-3080"
        )
        expect(page.get_by_role("img", name="Allocated GPU devices over time")).to_have_count(0)
        page.screenshot(path=ARTIFACTS / "overview.png", full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        page.screenshot(path=ARTIFACTS / "overview-phone.png", full_page=True)
        page.set_viewport_size({"width": 1280, "height": 900})

        page.goto(detail_url)
        page.get_by_role("link", name="Delete unit").click()
        expect(page.get_by_role("heading", name="Delete unit browser-demo?")).to_be_visible()
        page.get_by_role("button", name="Delete browser-demo").click()
        expect(page.get_by_text("Deletion of browser-demo requested")).to_be_visible()
        page.evaluate("window.loadedOnce = true")
        status = page.locator("#status-heading .phase")
        expect(status).to_have_text("Terminated", timeout=SLOW)
        assert page.evaluate("window.loadedOnce") is True
        expect(page.get_by_role("link", name="Delete unit")).to_have_count(0)
    finally:
        remove_namespace_objects(tenant.namespace)


def test_tenant_user_cannot_see_another_tenants_unit(page, live_server):
    from playwright.sync_api import expect

    mine, theirs = TenantFactory(), TenantFactory()
    make_unit(mine, "my-unit")
    other = make_unit(theirs, "their-unit")
    log_in(page, make_user(mine).username)

    page.goto("/units/")
    expect(page.locator('tr[data-unit="my-unit"]')).to_have_count(1)
    expect(page.locator('tr[data-unit="their-unit"]')).to_have_count(0)
    response = page.goto(f"/units/{other.uid}/")
    assert response is not None
    assert response.status == 404
    expect(page.get_by_role("heading", name="No such unit")).to_be_visible()
    expect(page.get_by_text("their-unit")).to_have_count(0)
