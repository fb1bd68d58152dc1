"""The inventory admin: read-only views of nodes, devices (filter by class, node, allocated),
claims and sync runs."""

import pytest
from django.urls import reverse

from inventory.models import Claim, Device, DeviceClass, Node, SyncRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def mirror(db):
    DeviceClass.objects.create(name="nvidia-h100", selectors=["true"])
    DeviceClass.objects.create(name="nvidia-l40s", selectors=["true"])
    Node.objects.create(name="n1", ready=True)
    common = {"driver": "gpu.nvidia.com", "pool_complete": True, "content_hash": "h"}
    Device.objects.create(
        pool="n1",
        name="gpu-0",
        node_name="n1",
        device_classes=["nvidia-h100"],
        allocated=True,
        claim_namespace="t",
        claim_name="c",
        **common,
    )
    Device.objects.create(
        pool="n1", name="gpu-1", node_name="n1", device_classes=["nvidia-h100"], **common
    )
    Device.objects.create(
        pool="n2", name="gpu-0", node_name="n2", device_classes=["nvidia-l40s"], **common
    )
    Claim.objects.create(namespace="t", name="c", uid="u", allocated=True)
    SyncRun.objects.create(started_at="2026-11-30T00:00:00Z", error="cannot read the cluster")


def devices(admin_client, **query) -> list[str]:
    response = admin_client.get(reverse("admin:inventory_device_changelist"), query)
    return sorted(f"{d.pool}/{d.name}" for d in response.context["cl"].result_list)


def test_devices_filter_by_class_node_and_allocation(admin_client, mirror):
    assert devices(admin_client) == ["n1/gpu-0", "n1/gpu-1", "n2/gpu-0"]
    assert devices(admin_client, device_class="nvidia-h100") == ["n1/gpu-0", "n1/gpu-1"]
    assert devices(admin_client, node_name="n2") == ["n2/gpu-0"]
    assert devices(admin_client, allocated__exact="1") == ["n1/gpu-0"]


@pytest.mark.parametrize("model", ["node", "device", "devicepool", "claim", "quota", "syncrun"])
def test_mirror_pages_are_read_only(admin_client, mirror, model):
    changelist = admin_client.get(reverse(f"admin:inventory_{model}_changelist"))
    assert changelist.status_code == 200
    assert changelist.context["has_add_permission"] is False
    assert admin_client.get(reverse(f"admin:inventory_{model}_add")).status_code == 403


def test_a_mirror_row_cannot_be_changed(admin_client, mirror):
    node = Node.objects.get()
    url = reverse("admin:inventory_node_change", args=[node.pk])
    assert admin_client.get(url).status_code == 200  # viewable
    assert admin_client.post(url, {"name": "renamed", "ready": "on"}).status_code == 403
    assert Node.objects.get().name == "n1"


def test_node_quantities_read_as_cores_and_gib_when_stored_as_integers(admin_client):
    node = Node.objects.create(
        name="gpu-node-1",
        ready=True,
        cpu_allocatable_millicores=95_500,
        cpu_requested_millicores=10_000,
        memory_allocatable_bytes=249_108_103_168,
        memory_requested_bytes=40 * 2**30,
    )
    changelist = admin_client.get(reverse("admin:inventory_node_changelist")).content.decode()
    detail = admin_client.get(reverse("admin:inventory_node_change", args=[node.pk]))
    for page in (changelist, detail.content.decode()):
        assert "232 GiB" in page
        assert "40 GiB" in page
        assert "95.5 cores" in page
        assert "10 cores" in page
        assert "249108103168" not in page
        assert "95500" not in page
