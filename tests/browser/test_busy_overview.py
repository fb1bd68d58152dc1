"""The overview of a busy tenant fits: a few hundred units over every package and a month of
usage, at a laptop's and a phone's width, as the customer and as staff."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing import periods
from billing.models import UsageRecord
from billing.tests.helpers import hold, priced
from dashboard.tests.conftest import make_unit, make_user
from tenancy.tests.factories import TenantFactory
from tests.browser.conftest import log_in
from tests.browser.test_layout import PACKAGES, check_widths

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.long]


def test_a_busy_overview_fits_a_laptop_and_a_phone(page, live_server):
    packages = [
        priced(
            package_id,
            "2.50",
            spec_name=spec_name,
            cpu=cpu,
            memory=memory,
            gpu=gpu,
            count=gpu,
            device_class_name=device_class,
        )
        for package_id, spec_name, cpu, memory, gpu, device_class in PACKAGES
    ]
    tenant = TenantFactory(quota_cpu="100000", quota_memory="100Ti", quota_claims=1000)
    this_hour = periods.floor_hour(timezone.now())
    phases = ["Running"] * 6 + ["Pending", "Stopped", "Failed", "Terminated"]
    for index in range(300):
        unit = make_unit(
            tenant,
            f"worker-{index:03d}",
            phase=phases[index % len(phases)],
            package=packages[index % len(packages)],
        )
        if index % 7 == 0:  # a month of usage over every package: each day, for hours
            for day in reversed(range(30)):  # oldest first: a meter opens after the last end
                start = this_hour - timedelta(days=day + 1, hours=index % 7)
                hold(unit, start, start + timedelta(hours=3))
    assert UsageRecord.objects.filter(tenant=tenant).count() >= 900
    problems: list = []
    log_in(page, make_user(tenant).username)
    page.goto("/")
    check_widths(page, "overview-busy-customer", problems)
    # Off the live page first: a refresh it has in flight, answered without the session,
    # would navigate to the login page and abort the navigation below (seen once in a full
    # run as net::ERR_ABORTED).
    page.goto("about:blank")
    page.context.clear_cookies()
    log_in(page, make_user(staff=True).username)
    page.goto("/")
    check_widths(page, "overview-busy-staff", problems)
    assert problems == []
