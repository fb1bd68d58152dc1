"""Packages are checked on save against what the devices of their class offer, once the
inventory has seen them (the sample topology: H100s publish memory only; HAMi's shared H100s
publish cores 0-100 and memory)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from catalog.tests.factories import PackageFactory
from inventory.sync import sync_inventory

pytestmark = pytest.mark.django_db(transaction=True)

HAMI = "hami-core-gpu.project-hami.io"


def refused(**fields) -> dict:
    with pytest.raises(ValidationError) as caught:
        PackageFactory(**fields)
    return caught.value.message_dict


def test_capacity_a_device_of_the_class_does_not_offer_is_refused(cluster):
    # Before the cluster is seen nothing is known, so nothing is refused.
    PackageFactory(device_class_name="nvidia-h100", capacity={"cores": "25"})
    sync_inventory()
    problems = refused(device_class_name="nvidia-h100", capacity={"cores": "25"})
    assert "no device of class nvidia-h100 publishes capacity cores" in problems["capacity"][0]
    assert "memory" in problems["capacity"][0]  # what its devices do have
    too_much = refused(device_class_name=HAMI, gpu=1, count=1, capacity={"cores": "150"})
    assert "more than a device of class" in too_much["capacity"][0]
    share = PackageFactory(device_class_name=HAMI, gpu=1, count=1, capacity={"cores": "25"})
    assert share.capacity == {"cores": "25"}
    fallback = refused(
        alternatives=[
            {"name": "shared", "deviceClassName": HAMI, "count": 1, "capacity": {"tflops": "1"}}
        ]
    )
    assert "alternative shared: no device of class" in fallback["alternatives"][0]


def test_capacity_the_request_policy_would_round_up_is_refused_naming_the_amount(cluster):
    sync_inventory()
    # HAMi's memory is handed out from 1Mi in steps of 1Mi: 1500Ki would be held as 2Mi.
    problems = refused(device_class_name=HAMI, gpu=1, count=1, capacity={"memory": "1500Ki"})
    assert "would round it up to 2Mi; ask for 2Mi" in problems["capacity"][0]
    on_step = PackageFactory(device_class_name=HAMI, gpu=1, count=1, capacity={"memory": "2Mi"})
    assert on_step.capacity == {"memory": "2Mi"}
