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


def test_the_admin_refuses_an_active_package_that_could_never_place(cluster, admin_client):
    """Issue 43, item 6: a DeviceClass no cluster has, a selector that fails on every device (a
    string attribute compared with a number) or matches none; an inactive package may be
    prepared ahead."""
    from catalog.models import Package
    from catalog.tests.test_admin import ADD_URL, form_data

    sync_inventory()
    product = "device.attributes['gpu.nvidia.com'].productName"

    def errors(**fields) -> dict:
        response = admin_client.post(ADD_URL, form_data(**fields))
        assert response.status_code == 200, "saved"
        return response.context["adminform"].form.errors

    unknown = errors(device_class_name="nvidia-b200", selectors="")
    assert "No cluster has a DeviceClass named nvidia-b200" in unknown["device_class_name"][0]
    assert "nvidia-l40s" in unknown["device_class_name"][0]  # what the clusters do have
    mistyped = errors(selectors=f"{product} > 1")
    assert f"Selector 1 ({product} > 1) matches none of the" in mistyped["selectors"][0]
    said = "cannot be evaluated on them (No such overload: the operation is not defined"
    assert said in mistyped["selectors"][0]
    nothing = errors(selectors=f"{product} == 'NVIDIA L40S'\n{product} == 1")
    assert "Selector 2" in nothing["selectors"][0]
    assert "devices of class nvidia-l40s" in nothing["selectors"][0]
    assert "it is false for every one" in nothing["selectors"][0]
    assert not Package.objects.exists()

    prepared = form_data(device_class_name="nvidia-b200", selectors="")
    prepared.pop("active")
    saved = admin_client.post(ADD_URL, prepared, follow=True).content.decode()
    assert "Before activating it: No cluster has a DeviceClass named nvidia-b200" in saved
    assert admin_client.post(ADD_URL, form_data(id="l40s-4x")).status_code == 302
    assert set(Package.objects.values_list("id", flat=True)) == {
        "gpu-l40s-4x-cpu48-mem192g",
        "l40s-4x",
    }
