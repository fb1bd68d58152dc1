"""The dashboard in a real browser (Debian's Chromium, headless, driven by Playwright) against
the live server, a real Celery worker and the simulated cluster: order a unit, watch it turn
Running without reloading, inspect it, stop, start and edit it, delete it, and stay inside
one's own tenant."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from django.db import connections

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from dashboard.tests.conftest import make_unit, make_user
from inventory.sync import sync_inventory
from runtime import orders
from runtime.control import reconcile
from runtime.models import GPUUnit
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase
from tenancy.tests.factories import TenantFactory
from tests.browser.conftest import ARTIFACTS, log_in

SLOW = 30_000  # ms: provisioning or teardown through the worker and the cluster

pytestmark = [
    pytest.mark.long,
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


def test_stop_start_and_edit_a_unit_while_its_page_stays_open(page, beat, live_server):
    """Each action from the unit page, carried out by the worker against the simulated
    cluster; the page follows the phases and the buttons without a reload."""
    from playwright.sync_api import expect

    PackageFactory(article=True)
    tenant = TenantFactory()
    alice = make_user(tenant)
    orders.create_unit(
        tenant=tenant,
        operation_id="browser-lifecycle-1",
        name="lifecycle-demo",
        package_id=ARTICLE_PACKAGE_ID,
        image="python:3.12",
    )
    unit = wait_for_phase(GPUUnit.objects.get(name="lifecycle-demo"), "Running")
    beat.resume()
    try:
        log_in(page, alice.username)
        page.goto(f"/units/{unit.uid}/")
        status = page.locator("#status-heading .phase")
        expect(status).to_have_text("Running", timeout=SLOW)
        start = page.get_by_role("button", name="Start")
        expect(start).to_have_attribute("aria-disabled", "true")
        expect(start).to_have_accessible_description(re.compile("it is Running"))

        page.get_by_role("link", name="Stop lifecycle-demo").click()
        expect(page.get_by_role("heading", name="Stop unit lifecycle-demo?")).to_be_visible()
        page.screenshot(path=ARTIFACTS / "unit-stop-confirm.png", full_page=True)
        page.get_by_role("button", name="Stop lifecycle-demo").click()
        expect(page.get_by_text(re.compile(r"Stop of lifecycle-demo requested"))).to_be_visible()
        page.evaluate("window.loadedOnce = true")
        expect(status).to_have_text("Stopped", timeout=SLOW)
        expect(page.get_by_role("button", name="Start lifecycle-demo")).to_be_enabled(timeout=SLOW)
        expect(page.locator("table.devices")).to_have_count(0)
        assert page.evaluate("window.loadedOnce") is True
        page.screenshot(path=ARTIFACTS / "unit-stopped-live.png", full_page=True)

        page.get_by_role("button", name="Start lifecycle-demo").click()
        expect(page.get_by_text(re.compile(r"Start of lifecycle-demo requested"))).to_be_visible()
        page.evaluate("window.loadedOnce = true")
        expect(status).to_have_text("Running", timeout=SLOW)
        expect(page.get_by_role("link", name="Edit lifecycle-demo")).to_be_visible(timeout=SLOW)
        assert page.evaluate("window.loadedOnce") is True

        page.get_by_role("link", name="Edit lifecycle-demo").click()
        expect(page.get_by_label("Image")).to_have_value("python:3.12")
        page.get_by_label("Image").fill("python:3.13")
        page.get_by_label("Command").fill("python -m http.server 8080")
        page.get_by_label("Environment").fill("HF_HOME=/data/cache")
        page.get_by_label("Ports").fill("http:8080")
        page.screenshot(path=ARTIFACTS / "unit-edit-filled.png", full_page=True)
        page.get_by_role("button", name="Save changes").click()
        saved = page.get_by_text(re.compile(r"Update of lifecycle-demo to generation \d+"))
        expect(saved).to_be_visible()
        page.evaluate("window.loadedOnce = true")
        expect(page.locator(".facts").first).to_contain_text("python:3.13")
        expect(page.locator(".status-facts .rollout")).to_have_count(0, timeout=SLOW)
        expect(status).to_have_text("Running", timeout=SLOW)
        expect(page.locator("ol.timeline")).to_contain_text("Updated")
        assert page.evaluate("window.loadedOnce") is True
        page.screenshot(path=ARTIFACTS / "unit-updated.png", full_page=True)
        unit.refresh_from_db()
        assert unit.image == "python:3.13"
        assert unit.observed_generation == unit.generation
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
