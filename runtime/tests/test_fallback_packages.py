"""Fallback packages ("H100 x8, else L40S x8"): the catalog's rules and YAML, the claim
(firstAvailable, valid for 1.34 strict), availability from the first alternative that fits,
and through the stack the unit on its second alternative saying so."""

from __future__ import annotations

import dataclasses

import kubernetes_validate
import pytest
import yaml
from django.core.exceptions import ValidationError

from catalog.models import Package
from catalog.tests.factories import PackageFactory
from catalog.validation import alternatives as check_alternatives
from catalog.yaml_io import dump_document, entry_to_fields, package_to_entry, parse_document
from inventory.sync import sync_inventory
from runtime import manifests
from runtime.tests.helpers import order_unit, remove_namespace_objects, wait_for_phase
from runtime.tests.test_manifests import CONTRACT
from tests.endpoints import client_for

L40S = {"name": "l40s", "deviceClassName": "nvidia-l40s", "count": 8}


def fallback(**overrides) -> Package:
    return PackageFactory(
        id="h100-8x-else-l40s",
        spec_name="gpu.h100.8x",
        device_class_name="nvidia-h100",
        gpu=8,
        count=8,
        cpu="16",
        memory="64Gi",
        alternatives=[L40S],
        **overrides,
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"name": "x"}, "must be a list"),
        ([{**L40S, "name": "primary"}], "reserved primary"),
        ([L40S, L40S], "used twice"),
        ([{**L40S, "count": 0}], "count must be"),
        ([{**L40S, "deviceClassName": "Not Valid"}], "deviceClassName"),
        ([{**L40S, "selectors": ["1 + 1"]}], "Selector 1 (1 + 1): must evaluate to bool"),
        ([{**L40S, "gpu": 1}], "unknown field gpu"),
        ([{**L40S, "name": f"a{i}"} for i in range(8)], "at most 7"),
    ],
)
def test_alternatives_are_checked(value, problem):
    assert problem in (check_alternatives(value)[1] or "")


@pytest.mark.django_db
def test_a_fallback_package_round_trips_as_yaml():
    package = fallback()
    package.refresh_from_db()
    text = dump_document([package_to_entry(package)])
    entry = yaml.safe_load(text)["packages"][0]
    assert entry["allocation"]["alternatives"] == [L40S]
    (parsed,) = parse_document(text)
    fields, errors = entry_to_fields(parsed)
    assert errors == {}
    assert fields["alternatives"] == [L40S]
    with pytest.raises(ValidationError) as caught:
        PackageFactory(alternatives=[{**L40S, "count": "8"}])
    assert "alternatives" in caught.value.message_dict


def test_the_claim_asks_first_available_and_is_valid_for_1_34():
    contract = dataclasses.replace(
        CONTRACT,
        device_class_name="nvidia-h100",
        gpu=8,
        count=8,
        alternatives=[{**L40S, "selectors": ["device.driver == 'gpu.nvidia.com'"]}],
    )
    claim = manifests.build_resource_claim(contract, owner_uid="u")
    (request,) = claim["spec"]["devices"]["requests"]
    assert "exactly" not in request
    assert [sub["name"] for sub in request["firstAvailable"]] == ["primary", "l40s"]
    assert request["firstAvailable"][1]["selectors"] == [
        {"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}
    ]
    kubernetes_validate.validate(claim, "1.34.0", strict=True)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_worker")
def test_the_second_unit_lands_on_the_alternative_and_says_so(tenant, cluster):
    package = fallback()
    type(tenant).objects.filter(pk=tenant.pk).update(quota_cpu="1000", quota_memory="4Ti")
    client = client_for(tenant)

    def availability() -> dict:
        sync_inventory()
        return client.get(f"/api/v1/packages/{package.id}").json()["data"]["availability"]

    try:
        first = wait_for_phase(order_unit(client, "first", package.id), "Running")
        assert first.dra["alternative"] == "primary"
        shown = availability()
        assert shown["placeableNow"] == 1, shown
        assert "alternative l40s" in shown["reason"], shown
        second = wait_for_phase(order_unit(client, "second", package.id), "Running")
        assert second.dra["alternative"] == "l40s"
        data = client.get("/api/v1/gpu-units/second").json()["data"]
        assert data["draStatus"]["alternative"] == "l40s"
        assert {d["request"] for d in data["draStatus"]["devices"]} == {"gpu/l40s"}
        assert data["allocation"]["alternatives"] == [L40S]
        assert availability()["placeableNow"] == 0
        assert "no alternative fits either" in availability()["reason"]
        wait_for_phase(
            order_unit(client, "third", package.id), "Pending", reason="NoMatchingDevices"
        )
    finally:
        remove_namespace_objects(tenant.namespace)
