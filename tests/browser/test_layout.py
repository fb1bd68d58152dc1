"""Every dashboard page at a laptop's 1,366 px and a phone's 400 px: nothing wider than the
window, no table that has to be scrolled sideways to reach a column, and a screenshot of each
in test-artifacts/ (`<page>-<width>.png`) to look at."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.utils import timezone

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from dashboard.tests.conftest import PASSWORD, make_unit, make_user
from dracel import quantity
from inventory.sync import sync_inventory
from runtime import orders
from runtime.models import GPUStorage, GPUUnit, Reservation, TenantSecret
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase
from tenancy import services
from tenancy.models import WebhookEndpoint
from tenancy.tests.factories import TenantFactory
from tenancy.webhooks import EVENT_TYPES
from tests.browser.conftest import ARTIFACTS, log_in

WIDTHS = (1366, 400)

pytestmark = [
    pytest.mark.long,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("cluster"),
]

# The sample catalog's packages, plus one retired, so the staff table has every kind of row.
PACKAGES = [
    ("gpu-h100-1x-cpu16-mem128g", "gpu.h100.1x.16c.128g", "16", "128Gi", 1, "nvidia-h100"),
    ("gpu-h100-8x-cpu128-mem1024g", "gpu.h100.8x.128c.1024g", "128", "1Ti", 8, "nvidia-h100"),
    ("gpu-l40s-4x-cpu48-mem192g", "gpu.l40s.4x.48c.192g", "48", "192Gi", 4, "nvidia-l40s"),
    ("gpu-rtx3080-1x-cpu4-mem16g", "gpu.rtx3080.1x.4c.16g", "4", "16Gi", 1, "nvidia-rtx-3080"),
    ("gpu-rtx3080-2x-cpu10-mem40g", "gpu.rtx3080.2x.10c.40g", "10", "40Gi", 2, "nvidia-rtx-3080"),
]
LONG_NAME = "nightly-finetune-of-the-large-model-with-a-long-name"  # 52 of 54 characters
LONG_STORAGE = "checkpoints-of-the-nightly-finetune-of-the-large-model"  # 54 of 55
LONG_SECRET = "database-credentials-for-the-nightly-finetune-runs-of-x"  # 55 of 56

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
    # Its objects exist as far as the lifecycle rules look, so its buttons are enabled.
    running = make_unit(
        tenant,
        LONG_NAME,
        reason="Running",
        unit_k8s_uid="00000000-0000-0000-0000-000000000001",
        stop_after="8h",
        stops_at=timezone.now() + timedelta(hours=7, minutes=12),
        generation=3,
        observed_generation=2,
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
    stopped = make_unit(
        tenant,
        LONG_NAME.removesuffix("-name") + "-off",
        phase="Stopped",
        reason="Stopped",
        message="The pod is gone and the claim's devices are back in the pool; the name, "
        "storage, SSH and access settings stay. Start the unit to run it again.",
        run_policy="Stopped",
        compute_charged=False,
        unit_k8s_uid="00000000-0000-0000-0000-000000000002",
        stop_after="1h30m",
        generation=2,
        observed_generation=2,
    )
    make_unit(
        tenant,
        "stopping-by-itself",
        phase="Stopping",
        reason="AutoStop",
        message="Stopped by the control plane: stopAfter 2h ran out at 2026-12-01 12:00:00 UTC.",
        run_policy="Stopped",
        unit_k8s_uid="00000000-0000-0000-0000-000000000003",
        stop_after="2h",
    )
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
        unit_k8s_uid="00000000-0000-0000-0000-000000000004",
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
    # Storages in every phase, recorded as the service would (rows only: no worker makes
    # their claims here), the longest mounted by the long-named unit and one other.
    for name, size, phase, mode, storage_class, message in (
        (LONG_STORAGE, "200Gi", "Bound", "ReadWriteMany", "nfs-client-provisioner-retain", ""),
        ("model-cache", "50Gi", "Bound", "ReadWriteOnce", "", ""),
        ("datasets", "500Gi", "Pending", "ReadOnlyMany", "standard", ""),
        (
            "scratch",
            "1Gi",
            "Failed",
            "ReadWriteOncePod",
            "no-such-class",
            'the cluster refused the claim: storageclass.storage.k8s.io "no-such-class" not found',
        ),
        ("old-results", "10Gi", "Lost", "ReadWriteOnce", "", ""),
        ("leftovers", "5Gi", "Terminating", "ReadWriteOnce", "", "Deletion requested."),
    ):
        GPUStorage.objects.create(
            tenant=tenant,
            name=name,
            size=size,
            size_bytes=quantity.parse_bytes(size),
            phase=phase,
            access_mode=mode,
            storage_class=storage_class,
            message=message,
        )
    # Reservations in every status (rows only: no beat holds their devices here), one with
    # the longest name and a message.
    long_reservation = "nightly-finetune-window-of-the-large-mod"  # 40 of 40
    now = timezone.now()
    for name, status, count, held, message in (
        (
            long_reservation,
            "Active",
            8,
            5,
            "5 of 8 slot(s) hold devices: the rest wait for devices to be free in its cluster.",
        ),
        ("weekend", "Scheduled", 2, 0, ""),
        ("last-week", "Ended", 1, 0, "Ended at 2026-11-27 18:00:00 UTC."),
        ("never", "Cancelled", 4, 0, "Cancelled before its start."),
    ):
        Reservation.objects.create(
            tenant=tenant,
            name=name,
            package_id="gpu-h100-1x-cpu16-mem128g",
            count=count,
            start=now + timedelta(days=1 if status == "Scheduled" else -1),
            end=now + timedelta(days=2),
            cluster="default",
            region="default",
            status=status,
            held=held,
            message=message,
        )
    # Secrets (rows only: the page shows names and keys, never a value), the longest name
    # and many long keys, one read by a unit.
    TenantSecret.objects.create(
        tenant=tenant,
        name=LONG_SECRET,
        keys=sorted(
            ["PGSSLROOTCERT.pem", "POSTGRES_DB", "POSTGRES_HOST", "POSTGRES_PASSWORD"]
            + [f"REPLICA_{n}_CONNECTION_STRING_FOR_THE_READ_ONLY_POOL" for n in range(6)]
        ),
    )
    TenantSecret.objects.create(tenant=tenant, name="hf", keys=["token"])
    make_unit(
        tenant,
        LONG_NAME.removesuffix("-name") + "-hf",
        reason="Running",
        template={"env": [{"name": "HF_TOKEN", "secretRef": {"name": "hf", "key": "token"}}]},
    )
    mounted = make_unit(
        tenant,
        LONG_NAME.removesuffix("-name") + "-io",
        reason="Running",
        storage_mounts=[
            {
                "name": LONG_STORAGE,
                "mountPath": "/checkpoints/nightly/large-model",
                "readOnly": False,
            },
            {"name": "datasets", "mountPath": "/datasets", "readOnly": True},
            {"name": "model-cache", "mountPath": "/root/.cache/huggingface", "readOnly": False},
        ],
    )
    # SSH with the command known (every key, the longest names), and one still waiting for
    # its node port.
    shell = make_unit(
        tenant,
        LONG_NAME.removesuffix("-name") + "-ssh",
        reason="Running",
        ssh={"enabled": True, "keys": ["build-server-in-the-basement", "laptop", "yubikey"]},
        exposed={"sshNodePort": 31022},
    )
    shell_pending = make_unit(
        tenant,
        "shell-starting",
        phase="Provisioning",
        ssh={"enabled": True, "keys": ["laptop"]},
    )
    make_unit(other, "someone-elses-unit", phase="Provisioning")
    # An API key with the longest name it may have, one revoked, and webhooks to long URLs
    # subscribed to every event and to each event by name (their rows' widest cells).
    services.create_api_key(tenant=tenant, name="n" * 100)
    services.revoke_api_key(api_key=services.create_api_key(tenant=tenant, name="old")[0])
    for events in (["*"], list(EVENT_TYPES)):
        WebhookEndpoint.objects.create(
            tenant=tenant,
            url="https://hooks.example.com/" + "a-long-path/" * 12,
            events=events,
            description="the on-call bot of the team that trains the largest models",
            secret="whsec_dGVzdA==",
        )
    sync_inventory()
    return {
        "customer": customer,
        "staff": make_user(staff=True),
        "two_tenants": make_user(tenant, other),
        "running": running,
        "stopped": stopped,
        "web": web,
        "tcp": tcp,
        "mounted": mounted,
        "shell": shell,
        "shell_pending": shell_pending,
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
        ("unit-stopped", f"/units/{data['stopped'].uid}/"),
        ("unit-stop", f"/units/{data['running'].uid}/stop/"),
        ("unit-restart", f"/units/{data['running'].uid}/restart/"),
        ("unit-edit", f"/units/{data['web'].uid}/edit/"),
        ("unit-access-http", f"/units/{data['web'].uid}/"),
        ("unit-access-tcp", f"/units/{data['tcp'].uid}/"),
        ("packages-customer", "/packages/"),
        ("ssh-keys-customer", "/ssh-keys/"),
        ("ssh-key-delete", "/ssh-keys/build-server-in-the-basement/delete/"),
        ("secrets-customer", "/secrets/"),
        ("secret-delete", f"/secrets/{LONG_SECRET}/delete/"),
        ("secret-delete-in-use", "/secrets/hf/delete/"),
        ("storage-customer", "/storage/"),
        ("reservations-customer", "/reservations/"),
        ("storage-delete", "/storage/old-results/delete/"),
        ("storage-delete-mounted", f"/storage/{LONG_STORAGE}/delete/"),
        ("unit-storage", f"/units/{data['mounted'].uid}/"),
        ("unit-ssh", f"/units/{data['shell'].uid}/"),
        ("unit-ssh-pending", f"/units/{data['shell_pending'].uid}/"),
        ("api-keys-customer", "/api-keys/"),
        ("webhooks-customer", "/webhooks/"),
        ("new-unit", "/units/new"),  # last: the form is used below
    ):
        page.goto(path)
        if name == "unit-storage":
            # The log region has fetched its answer (no pod: the unit is a row only).
            expect(page.locator("#unit-log")).to_contain_text("No log yet")
        check_widths(page, name, problems)
        if name == "unit-detail":
            # A button that cannot act now is still reached from the keyboard, and says why.
            page.get_by_role("link", name="Delete unit").focus()
            page.keyboard.press("Tab")
            start = page.get_by_role("button", name="Start")
            expect(start).to_be_focused()
            expect(start).to_have_accessible_description(re.compile(r"it is Running\.$"))
            page.locator(".status-card").screenshot(path=ARTIFACTS / "unit-actions-focus-start.png")
            page.keyboard.press("Tab")
            expect(page.get_by_role("link", name="Stop")).to_be_focused()
            page.locator(".status-card").screenshot(path=ARTIFACTS / "unit-actions-focus-stop.png")
        if name == "unit-access-http":
            expect(page.locator("a.unit-url")).to_have_attribute("href", re.compile("^https://"))
        if name == "unit-access-tcp":
            expect(page.get_by_role("button", name="Copy the URL")).to_be_visible()
        if name == "unit-ssh":
            expect(page.get_by_role("button", name="Copy the ssh command")).to_be_visible()
            expect(page.locator("#ssh-command")).to_have_text(
                "ssh -p 31022 runtime@gpu-nodes.example.com"
            )
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
    page.get_by_label("Ports").fill("")
    page.get_by_label("Storage mounts").fill(f"{LONG_STORAGE}:checkpoints, datasets:/data:ro")
    page.get_by_role("button", name="Order unit").click()
    expect(page.get_by_role("alert")).to_contain_text("Storage mounts")
    check_widths(page, "new-unit-mounts-error", problems)
    page.get_by_label("Storage mounts").fill("")
    page.get_by_label("build-server-in-the-basement").check()
    page.get_by_role("button", name="Order unit").click()
    expect(page.get_by_role("alert")).to_contain_text("SSH keys to let in")
    check_widths(page, "new-unit-ssh-error", problems)

    # The edit form's errors, each next to its field.
    page.goto(f"/units/{data['web'].uid}/edit/")
    page.get_by_label("Image").fill("Not An Image!")
    page.get_by_label("Environment").fill("HF_HOME=/data/cache\nJUST_A_NAME")
    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("alert")).to_contain_text("The change was not saved")
    check_widths(page, "unit-edit-error", problems)

    page.goto("/storage/")
    page.get_by_label("Name").fill("huge")
    page.get_by_label("Size").fill("100Ti")
    page.get_by_role("button", name="Create storage").click()
    expect(page.get_by_role("alert")).to_contain_text("The storage was not created")
    check_widths(page, "storage-error", problems)

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
        ("secrets-staff-tenant", f"/secrets/?tenant={data['tenant'].slug}"),
        ("storage-staff", "/storage/"),
        ("storage-staff-tenant", f"/storage/?tenant={data['tenant'].slug}"),
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


# A log as customers' programs write them: a long unbroken line (a path, a URL), terminal
# colours, a progress bar, and markup that must show as text.
LOG_LINES = [
    "Loading checkpoint /checkpoints/nightly/large-model/"
    + "shard-00001-of-00008-" * 8
    + "safetensors",
    "\x1b[32mINFO\x1b[0m epoch 1/10 loss=0.9132 lr=3e-4 throughput=1843.2 samples/s",
    " 10%|#         | 10/100\r 50%|#####     | 50/100\r100%|##########| 100/100",
    '<script>alert("not run")</script> & <b>not bold</b>',
    *(f"step {step} loss={1 / step:.4f}" for step in range(1, 40)),
]


def test_unit_log_fits_a_laptop_and_a_phone(page, live_server, cluster, celery_worker):
    """The log tail of a unit that runs on the simulated cluster, on the unit page and its own
    page, as text (never markup), refreshed as lines arrive."""
    from playwright.sync_api import expect

    PackageFactory(article=True)
    tenant = TenantFactory()
    customer = make_user(tenant)
    orders.create_unit(
        tenant=tenant,
        operation_id="layout-log-1",
        name=LONG_NAME,
        package_id=ARTICLE_PACKAGE_ID,
        image="registry.example.com/team/trainer:2026-12-01",
    )
    unit = wait_for_phase(GPUUnit.objects.get(name=LONG_NAME), "Running")
    try:
        cluster.append_log(unit.namespace, f"unit-{unit.name}", LOG_LINES)
        problems: list = []
        log_in(page, customer.username)
        page.goto(f"/units/{unit.uid}/")
        log = page.locator("pre.log-tail")
        expect(log).to_contain_text("step 39 loss=0.0256")
        expect(log).to_contain_text('<script>alert("not run")</script> & <b>not bold</b>')
        expect(page.locator("pre.log-tail b")).to_have_count(0)
        expect(log).to_contain_text("100%|##########| 100/100")
        check_widths(page, "unit-log", problems)
        # New lines arrive without a reload, and the box follows them.
        cluster.append_log(unit.namespace, f"unit-{unit.name}", ["epoch 2/10 started"])
        expect(log).to_contain_text("epoch 2/10 started", timeout=10_000)
        at_end = log.evaluate("box => box.scrollTop + box.clientHeight >= box.scrollHeight - 4")
        assert at_end, "the log box did not follow the newest line"
        # A reader who scrolled up to older lines stays at them when new ones arrive.
        log.evaluate("box => { box.scrollTop = 40; }")
        cluster.append_log(unit.namespace, f"unit-{unit.name}", ["epoch 3/10 started"])
        expect(log).to_contain_text("epoch 3/10 started", timeout=10_000)
        assert log.evaluate("box => box.scrollTop") == 40, "the reader lost their place"
        page.goto(f"/units/{unit.uid}/log/")
        expect(page.locator("pre.log-tail")).to_contain_text("epoch 3/10 started")
        check_widths(page, "unit-log-page", problems)
        assert not problems, "\n".join(map(str, problems))
    finally:
        remove_namespace_objects(unit.namespace)
