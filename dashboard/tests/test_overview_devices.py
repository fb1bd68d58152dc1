"""The overview's device tables: per class and per node, allocated or tainted devices are not
free (a tainted device is never given to a claim)."""

from __future__ import annotations

import pytest

from dashboard import queries
from inventory.models import Device, DeviceClass, Node

pytestmark = pytest.mark.django_db


def device(
    name: str, *, allocated: bool = False, tainted: bool = False, model: str = "nvidia-h100"
) -> Device:
    return Device.objects.create(
        driver="gpu.nvidia.com",
        pool="node-a",
        name=name,
        node_name="node-a",
        pool_complete=True,
        device_classes=["gpu.nvidia.com", model],
        allocated=allocated,
        tainted=tainted,
    )


def test_tainted_and_allocated_devices_are_not_free():
    DeviceClass.objects.create(name="gpu.nvidia.com")
    DeviceClass.objects.create(name="nvidia-h100")
    DeviceClass.objects.create(name="nvidia-l40s")
    DeviceClass.objects.create(name="nvidia-rtx-3080")  # no device of it: not listed
    Node.objects.create(name="node-a", ready=True)
    device("gpu-0")
    device("gpu-1", allocated=True)
    device("gpu-2", tainted=True)
    device("gpu-3", allocated=True, tainted=True)
    device("gpu-4", model="nvidia-l40s")
    totals = queries.device_totals_by_class()
    assert (totals.all_devices.total, totals.all_devices.allocated) == (5, 2)
    assert totals.all_devices.free == 2
    h100, l40s = totals.model_classes
    assert (h100.name, h100.total, h100.allocated, h100.free) == ("nvidia-h100", 4, 2, 1)
    assert (l40s.name, l40s.free) == ("nvidia-l40s", 1)
    assert totals.catch_all == ["gpu.nvidia.com"]
    (node,) = queries.device_totals_by_node()
    assert (node.name, node.ready, node.free) == ("node-a", True, 2)
