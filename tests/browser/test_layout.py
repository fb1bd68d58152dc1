"""Every dashboard page at a laptop's 1,366 px and a phone's 400 px: nothing wider than the
window, no table that has to be scrolled sideways to reach a column, and a screenshot of each
in test-artifacts/ (`<page>-<width>.png`) to look at."""

from __future__ import annotations

import re

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from catalog.tests.factories import PackageFactory
from dashboard.tests.conftest import PASSWORD, make_unit, make_user
from inventory.sync import sync_inventory
from tenancy import services
from tenancy.tests.factories import TenantFactory
from tests.browser.conftest import ARTIFACTS, log_in

WIDTHS = (1366, 400)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("cluster")]

# The sample catalog's packages, plus one retired, so the staff table has every kind of row.
PACKAGES = [
    ("gpu-h100-1x-cpu16-mem128g", "gpu.h100.1x.16c.128g", "16", "128Gi", 1, "nvidia-h100"),
    ("gpu-h100-8x-cpu128-mem1024g", "gpu.h100.8x.128c.1024g", "128", "1Ti", 8, "nvidia-h100"),
    ("gpu-l40s-4x-cpu48-mem192g", "gpu.l40s.4x.48c.192g", "48", "192Gi", 4, "nvidia-l40s"),
    ("gpu-rtx3080-1x-cpu4-mem16g", "gpu.rtx3080.1x.4c.16g", "4", "16Gi", 1, "nvidia-rtx-3080"),
    ("gpu-rtx3080-2x-cpu10-mem40g", "gpu.rtx3080.2x.10c.40g", "10", "40Gi", 2, "nvidia-rtx-3080"),
]
LONG_NAME = "nightly-finetune-of-the-large-model-with-a-long-name"  # 52 of 54 characters

# What a page must not do, measured in the page: the document wider than the window, or a
# table region that needs sideways scrolling to show all its columns.
MEASURE = """() => {
  const root = document.documentElement;
  const cut = [...document.querySelectorAll('.table-wrap')]
    .filter((region) => region.scrollWidth > region.clientWidth + 1)
    .map((region) => {
      const name = region.getAttribute('aria-label') || region.id
        || region.getAttribute('aria-labelledby');
      return `${name}: ${region.scrollWidth} > ${region.clientWidth}`;
    });
  return {scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, cut};
}"""


def seed() -> dict:
    """A catalog, an inventory from the simulated cluster and units in every kind of state,
    with the longest names and reasons the product allows."""
    for package_id, spec_name, cpu, memory, gpu, device_class in PACKAGES:
        PackageFactory(
            id=package_id,
            spec_name=spec_name,
            cpu=cpu,
            memory=memory,
            gpu=gpu,
            count=gpu,
            device_class_name=device_class,
        )
    PackageFactory(id="gpu-a100-4x-cpu32-mem256g-retired", active=False)
    tenant, other = TenantFactory(), TenantFactory()
    customer = make_user(tenant)
    running = make_unit(
        tenant,
        LONG_NAME,
        reason="Running",
        node_name="sim-node-rtx3080-a",
        dra={
            "allocated": True,
            "devices": [
                {
                    "request": "gpu",
                    "driver": "gpu.nvidia.com",
                    "pool": "sim-node-rtx3080-a",
                    "device": f"gpu-{index}",
                }
                for index in range(2)
            ],
        },
    )
    make_unit(
        tenant,
        "waiting-for-an-h100",
        phase="Pending",
        reason="NoMatchingDevices",
        message="cannot allocate all claims: no device of class nvidia-h100 is free on any node",
    )
    make_unit(
        tenant,
        "bad-image",
        phase="Failed",
        reason="ImagePullFailed",
        message='Back-off pulling image "registry.example.com/team/trainer:does-not-exist"',
    )
    make_unit(tenant, "finished-yesterday", phase="Terminated", reason="Terminated")
    # Reached by a public URL, with in-cluster ports beside it whose addresses are the longest
    # a unit name allows; and one reached over TCP on a node port.
    web = make_unit(
        tenant,
        LONG_NAME.removesuffix("-name") + "-web",
        reason="Running",
        template={
            "ports": [
                {"name": "http", "port": 8080, "protocol": "TCP"},
                {"name": "metrics", "port": 9100, "protocol": "UDP"},
                {"name": "tensorboard", "port": 6006, "protocol": "TCP"},
            ]
        },
        access={"primaryPort": "http", "scheme": "http"},
    )
    tcp = make_unit(
        tenant,
        "postgres-for-training",
        reason="Running",
        template={"ports": [{"name": "postgres", "port": 5432, "protocol": "TCP"}]},
        access={"primaryPort": "postgres", "scheme": "tcp"},
        exposed={"nodePorts": {"postgres": 31432}},
    )
    for name, key in (
        ("laptop", ed25519.Ed25519PrivateKey.generate().public_key()),
        ("build-server-in-the-basement", rsa.generate_private_key(65537, 4096).public_key()),
        ("yubikey", ec.generate_private_key(ec.SECP384R1()).public_key()),
    ):
        text = key.public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        ).decode()
        services.add_ssh_key(
            tenant=tenant, name=name, public_key=f"{text} someone.with.a.long.name@workstation"
        )
    make_unit(other, "someone-elses-unit", phase="Provisioning")
    sync_inventory()
    return {
        "customer": customer,
        "staff": make_user(staff=True),
        "two_tenants": make_user(tenant, other),
        "running": running,
        "web": web,
        "tcp": tcp,
        "tenant": tenant,
    }


def check_widths(page, name: str, problems: list) -> None:
    """The page as it stands, at each width: screenshot it, then note what does not fit."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=ARTIFACTS / f"{name}-{width}.png", full_page=True)
        measured = page.evaluate(MEASURE)
        if measured["scrollWidth"] > measured["clientWidth"] or measured["cut"]:
            problems.append((name, width, measured))


def test_every_page_fits_a_laptop_and_a_phone(page, live_server, settings):
    from playwright.sync_api import expect

    settings.ACCESS_DOMAIN = "units.gpu.example.com"
    settings.ACCESS_GATEWAY = "gateway-system/gpu-gateway"
    settings.ACCESS_TCP_SERVICE_TYPE = "NodePort"
    settings.ACCESS_TCP_HOST = "gpu-nodes.example.com"
    data = seed()
    problems: list = []
    page.goto("/accounts/login/")
    check_widths(page, "login", problems)

    log_in(page, data["customer"].username)
    for name, path in (
        ("overview-customer", "/"),
        ("units-customer", "/units/"),
        ("unit-detail", f"/units/{data['running'].uid}/"),
        ("unit-delete", f"/units/{data['running'].uid}/delete/"),
        ("unit-access-http", f"/units/{data['web'].uid}/"),
        ("unit-access-tcp", f"/units/{data['tcp'].uid}/"),
        ("packages-customer", "/packages/"),
        ("ssh-keys-customer", "/ssh-keys/"),
        ("ssh-key-delete", "/ssh-keys/build-server-in-the-basement/delete/"),
        ("new-unit", "/units/new"),
    ):
        page.goto(path)
        check_widths(page, name, problems)
        if name == "unit-access-http":
            expect(page.locator("a.unit-url")).to_have_attribute("href", re.compile("^https://"))
        if name == "unit-access-tcp":
            expect(page.get_by_role("button", name="Copy the URL")).to_be_visible()
    # The 8x H100 needs more memory than the tenant's whole quota: the form says so.
    page.get_by_role("radio", name=re.compile("gpu-h100-8x-cpu128-mem1024g")).check()
    page.get_by_label("Name").fill("too-big")
    page.get_by_label("Image").fill("python:3.12")
    page.get_by_role("button", name="Order unit").click()
    expect(page.get_by_role("alert")).to_contain_text("The unit was not ordered")
    check_widths(page, "new-unit-error", problems)
    page.get_by_role("radio", name=re.compile("gpu-rtx3080-1x-cpu4-mem16g")).check()
    page.get_by_label("Ports").fill("http:8080, prometheus-exporter:9100/UDP")
    page.get_by_role("button", name="Order unit").click()
    expect(page.get_by_role("alert")).to_contain_text("Ports")
    check_widths(page, "new-unit-ports-error", problems)

    page.goto("/ssh-keys/")
    page.get_by_label("Name").fill("old-rsa")
    page.get_by_label("Public key").fill("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDP9xE0 old")
    page.get_by_role("button", name="Add key").click()
    expect(page.get_by_role("alert")).to_contain_text("The key was not added")
    check_widths(page, "ssh-keys-error", problems)

    page.get_by_role("button", name="Log out").click()
    log_in(page, data["staff"].username)
    for name, path in (
        ("overview", "/"),
        ("units", "/units/?phase=all"),
        ("packages", "/packages/"),
        ("ssh-keys-staff", "/ssh-keys/"),
        ("ssh-keys-staff-tenant", f"/ssh-keys/?tenant={data['tenant'].slug}"),
    ):
        page.goto(path)
        check_widths(page, name, problems)
        if name == "overview":
            expect(page.get_by_role("img", name="Allocated GPU devices over time")).to_be_visible()

    page.get_by_role("button", name="Log out").click()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(data["two_tenants"].username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("heading", name="Choose the tenant you act for").wait_for()
    check_widths(page, "choose-tenant", problems)
    # Every page is measured before failing, so one run names all that do not fit.
    assert not problems, "\n".join(map(str, problems))
