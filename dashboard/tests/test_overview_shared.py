"""The overview's Shared GPUs table, from the mirror a sync of a development cluster leaves: per
shared device the claims holding a share and each capacity's consumed, total and remaining, for
operators only, and no section when no device is shared."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from controlplane import kube
from dashboard.tests.conftest import client_for, make_user
from devstack.cluster import DevCluster
from inventory.sync import sync_inventory
from tenancy.tests.factories import TenantFactory
from tests.endpoints import recording

pytestmark = pytest.mark.django_db(transaction=True)

OVERVIEW = "/"
HAMI = "hami-core-gpu.project-hami.io"
HEADING = "Shared GPUs"


def hold_shares(count: int, *, cores: str, memory: str) -> None:
    """`count` pods, each with a claim on a share of a HAMi GPU, running (so allocated)."""
    share = {"cores": cores, "memory": memory}
    names = [f"share-{index}" for index in range(count)]
    for name in names:
        request = {"deviceClassName": HAMI, "capacity": {"requests": share}}
        kube.create(
            kube.RESOURCECLAIM,
            "default",
            {
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
            },
        )
        kube.create(
            kube.POD,
            "default",
            {
                "metadata": {"name": name},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                },
            },
        )

    def allocated(name: str) -> bool:
        claim = kube.get(kube.RESOURCECLAIM, "default", name) or {}
        return bool((claim.get("status") or {}).get("allocation"))

    deadline = time.monotonic() + 30
    while not all(allocated(name) for name in names):
        assert time.monotonic() < deadline, "the shares were not allocated"
        time.sleep(0.1)


@contextlib.contextmanager
def cluster_of(topology: dict[str, Any] | None, folder: Path) -> Iterator[DevCluster]:
    """A development cluster of `topology` (None: the sample), this process pointed at it."""
    dev = DevCluster(folder, topology=topology)
    previous = settings.KUBECONFIG
    try:
        dev.start()
        settings.KUBECONFIG = str(dev.kubeconfig)
        kube.reset()
        yield dev
    finally:
        settings.KUBECONFIG = previous
        kube.reset()
        dev.stop()


@pytest.fixture(scope="module")
def sample_cluster(tmp_path_factory) -> Iterator[DevCluster]:
    """The sample topology (gpu-node-shared-0 with HAMi's hami-gpu-0 and hami-gpu-1) with
    three units' worth of shares, a quarter of the cores and 20Gi each, on one GPU."""
    with cluster_of(None, tmp_path_factory.mktemp("shared")) as dev:
        hold_shares(3, cores="25", memory="20Gi")
        yield dev


def shared_rows(body: str) -> list[list[str]]:
    """The Shared GPUs table's rows as their cells' text, a cell's list items joined by '; '."""
    section = body.split(f">{HEADING}</h2>")[1].split("</section>")[0]
    rows = []
    for row in re.findall(r"<tr role=\"row\">(.*?)</tr>", section.split("<tbody>")[1], re.S):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        rows.append(
            [
                " ".join(re.sub(r"<[^>]+>", " ", re.sub(r"</li>\s*<li>", "; ", cell)).split())
                for cell in cells
            ]
        )
    return rows


def statements(client: Client) -> int:
    with recording() as log:
        response = client.get(OVERVIEW)
    assert response.status_code == 200
    return len(log.statements)


@pytest.mark.parametrize("viewer", ["staff", "operator tenant"])
def test_operators_see_each_shared_gpus_shares_and_capacity_when_units_share_one(
    sample_cluster, viewer
):
    sync_inventory()
    user = (
        make_user(staff=True) if viewer == "staff" else make_user(TenantFactory(is_operator=True))
    )
    body = client_for(user).get(OVERVIEW).content.decode()
    assert shared_rows(body) == [
        [
            "gpu-node-shared-0/hami-gpu-0",
            "gpu-node-shared-0",
            "3",
            "cores 75 of 100 (25 left); memory 60Gi of 80Gi (20Gi left)",
        ],
        [
            "gpu-node-shared-0/hami-gpu-1",
            "gpu-node-shared-0",
            "0",
            "cores 0 of 100 (100 left); memory 0 of 80Gi (80Gi left)",
        ],
    ]


def test_customers_do_not_see_shared_gpus_when_the_cluster_has_them(sample_cluster, tenant):
    sync_inventory()
    response = client_for(make_user(tenant)).get(OVERVIEW)
    assert response.context["shared_devices"] is None
    body = response.content.decode()
    assert HEADING not in body
    assert "hami-gpu-0" not in body


def test_no_shared_gpus_section_when_no_device_is_shared(tmp_path):
    topology = {"generate": {"nodes": 1, "gpus_per_node": 2, "product": "NVIDIA H100 80GB HBM3"}}
    with cluster_of(topology, tmp_path / "cluster"):
        sync_inventory()
    response = client_for(make_user(staff=True)).get(OVERVIEW)
    assert response.context["shared_devices"] == []
    body = response.content.decode()
    assert "GPU devices by node" in body  # the operators' device section is there
    assert HEADING not in body


def shared_topology(gpus: int) -> dict:
    return {
        "products": {
            "NVIDIA H100 80GB HBM3": {
                "memory": "80Gi",
                "architecture": "Hopper",
                "cudaComputeCapability": "9.0.0",
                "nodeCpuPerGpu": 8,
                "nodeMemoryPerGpu": "64Gi",
            }
        },
        "deviceClasses": [{"name": HAMI, "selectors": [f"device.driver == '{HAMI}'"]}],
        "nodes": [
            {
                "name": "gpu-node-shared-0",
                "cpu": "64",
                "memory": "512Gi",
                "shareableGpus": [{"product": "NVIDIA H100 80GB HBM3", "count": gpus}],
            }
        ],
    }


def test_statements_flat_when_more_gpus_are_shared(tmp_path, monkeypatch):
    # One reading of the clock for both counts: the overview reads one statement fewer in a
    # UTC day's first minute (its costs, counted to the minute, reach no further).
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)
    staff = client_for(make_user(staff=True))
    counts = []
    for gpus in (1, 6):
        with cluster_of(shared_topology(gpus), tmp_path / f"cluster-{gpus}"):
            hold_shares(gpus, cores="60", memory="1Gi")  # one share on each GPU
            sync_inventory()
        assert len(staff.get(OVERVIEW).context["shared_devices"]) == gpus
        counts.append(statements(staff))
    assert counts[0] == counts[1]
