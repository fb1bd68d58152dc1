"""Fixtures for the browser tests: Debian's Chromium, headless, driven by Playwright against
the live server, and a login helper."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connections

from dashboard.tests.conftest import PASSWORD

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture
def playwright(monkeypatch):
    """Playwright's driver for one test. Its sync API keeps an event loop on this thread while
    it runs; the ORM calls the test makes between browser steps are still plain synchronous
    code, so Django is told not to refuse them. While that loop runs Django keeps this thread's
    connection apart (per async context), so it is closed here, before the loop stops, or it
    would outlive the test database."""
    if not CHROMIUM.exists():
        pytest.skip(
            f"no browser at {CHROMIUM}: install Debian's chromium (apt-get install chromium)"
        )
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as driver:
        yield driver
        connections.close_all()


@pytest.fixture
def page(playwright, tmp_path, monkeypatch, live_server, settings):
    """A page in a fresh headless Chromium profile; polls every second to keep the test short
    (the whole suite is one client address, so its per-address limit is lifted)."""
    monkeypatch.setattr("dashboard.pages.POLL_SECONDS", 1)
    settings.DASHBOARD_RATE_PER_ADDRESS = "1000000/min"
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"),
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_FLAGS,
        viewport={"width": 1280, "height": 900},
        base_url=live_server.url,
    )
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(10_000)
    ARTIFACTS.mkdir(exist_ok=True)
    yield page
    context.close()


def log_in(page, username: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("heading", name="Overview", level=1).wait_for()
