"""A package whose devices must agree on an attribute (`allocation.matchAttribute`): the claim's
constraint, valid for 1.34 strict, and through the stack on the sample topology's static MIG
node, two 1g.10gb slices of one parent GPU or none."""

from __future__ import annotations

import dataclasses

import kubernetes_validate
import pytest
from django.core.exceptions import ValidationError

from catalog.tests.factories import PackageFactory
from catalog.validation import match_attribute
from inventory.sync import sync_inventory
from runtime import manifests
from runtime.models import GPUUnit
from runtime.tests.helpers import order_unit, remove_namespace_objects, wait_for_phase
from runtime.tests.test_manifests import CONTRACT
from tests.endpoints import client_for

PARENT = "gpu.nvidia.com/parentUUID"
ONE_G = 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'
SEVEN_G = 'device.attributes["gpu.nvidia.com"].profile == "7g.80gb"'


@pytest.mark.parametrize(
    "value", ["parentUUID", "/parentUUID", "gpu.nvidia.com/", "Not A Domain/x", "gpu.nvidia.com/-x"]
)
def test_a_match_attribute_is_fully_qualified(value):
    assert match_attribute(value)


def test_the_claim_carries_the_constraint_valid_for_1_34():
    contract = dataclasses.replace(
        CONTRACT,
        device_class_name="mig.nvidia.com",
        selectors=[ONE_G],
        match_attribute=PARENT,
    )
    claim = manifests.build_resource_claim(contract, owner_uid="u")
    assert claim["spec"]["devices"]["constraints"] == [
        {"requests": ["gpu"], "matchAttribute": PARENT}
    ]
    kubernetes_validate.validate(claim, "1.34.0", strict=True)
    assert manifests.build_gpuunit(contract)["spec"]["allocation"]["matchAttribute"] == PARENT


@pytest.mark.django_db
def test_the_catalog_refuses_a_bare_attribute_name():
    with pytest.raises(ValidationError) as caught:
        PackageFactory(match_attribute="parentUUID")
    assert "match_attribute" in caught.value.message_dict


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_worker")
def test_two_slices_of_one_parent_or_none(tenant, cluster):
    # The sample's static MIG node: parent 0 has three 1g.10gb slices, parent 1 has one. Its
    # dynamic MIG node is taken whole by a 7g.80gb unit first: no 1g.10gb fits there then.
    whole = PackageFactory(
        id="mig-7g",
        device_class_name="mig.nvidia.com",
        selectors=[SEVEN_G],
        gpu=1,
        count=1,
        cpu="4",
        memory="16Gi",
    )
    loose = PackageFactory(
        id="mig-1g-pair-loose",
        device_class_name="mig.nvidia.com",
        selectors=[ONE_G],
        cpu="4",
        memory="16Gi",
    )
    paired = PackageFactory(
        id="mig-1g-pair",
        device_class_name="mig.nvidia.com",
        selectors=[ONE_G],
        cpu="4",
        memory="16Gi",
        match_attribute=PARENT,
    )
    client = client_for(tenant)

    def placeable(package) -> int:
        shown = client.get(f"/api/v1/packages/{package.id}").json()["data"]["availability"]
        return shown["placeableNow"]

    def parents(unit: GPUUnit) -> set[str]:
        return {d["device"].split("-mig-")[0] for d in unit.dra["devices"]}

    try:
        wait_for_phase(order_unit(client, "whole", whole.id), "Running")
        sync_inventory()
        assert placeable(paired) == 1  # parent 0 has three 1g slices, parent 1 one
        first = wait_for_phase(order_unit(client, "first", paired.id), "Running")
        assert len(parents(first)) == 1  # two slices of one GPU
        # One 1g slice is left on each parent: a pair of one parent does not fit, a loose
        # pair would, and GET /packages says so beforehand.
        sync_inventory()
        assert placeable(paired) == 0
        assert placeable(loose) == 1
        blocked = wait_for_phase(
            order_unit(client, "second", paired.id), "Pending", reason="NoMatchingDevices"
        )
        client.delete("/api/v1/gpu-units/second")
        wait_for_phase(blocked, "Terminated")
        loose_unit = wait_for_phase(order_unit(client, "third", loose.id), "Running")
        assert len(parents(loose_unit)) == 2
        shown = client.get("/api/v1/gpu-units/first").json()["data"]["allocation"]
        assert shown["matchAttribute"] == PARENT
    finally:
        remove_namespace_objects(tenant.namespace)
