"""Ordering an interruptible unit (ARCHITECTURE §22): only of a package sold as one, kept on the
unit, part of the order's identity (a replay that changes it is a conflict), and billed at the
interruptible price whatever device alternative it got; FOCUS calls that price Dynamic."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import exporting, periods, prices
from billing.models import Meter, PriceVersion, UsageRecord
from billing.tests.helpers import claim_of, pod_of, priced
from inventory.models import Cluster, Device, InventorySnapshot, PackageAvailability
from runtime.control import metering
from runtime.models import GPUUnit, Operation, UnitPhase
from runtime.tests.factories import UnitFactory
from tests.endpoints import EndpointTest

pytestmark = pytest.mark.django_db

URL = "/api/v1/gpu-units"


@pytest.fixture(autouse=True)
def packages(db):
    spot = priced("gpu-spot", "3.60", interruptible=True, interruptible_price="1.20")
    PriceVersion.objects.create(
        package_id=spot.id,
        alternative=prices.INTERRUPTIBLE,
        hourly=Decimal("1.20"),
        currency="USD",
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return spot, priced("gpu-plain", "3.60")


def body(**overrides) -> dict:
    return {
        "operationID": "spot-1",
        "name": "spot",
        "packageID": "gpu-spot",
        "image": "python:3.12",
        "interruptible": True,
        **overrides,
    }


class TestInterruptibleOrder(EndpointTest):
    method = "post"
    path = URL

    def test_an_interruptible_order_makes_an_interruptible_unit(self, auth_client):
        data = self.get_success_response(auth_client, data=body(), status=201).json()["data"]
        assert data["interruptible"] is True
        assert GPUUnit.objects.get().interruptible is True
        shown = auth_client.get(f"{URL}/spot").json()["data"]
        assert shown["interruptible"] is True

    def test_an_order_is_on_demand_unless_it_says_otherwise(self, auth_client):
        data = self.get_success_response(
            auth_client, data={k: v for k, v in body().items() if k != "interruptible"}, status=201
        ).json()["data"]
        assert data["interruptible"] is False

    def test_a_package_sold_on_demand_only_refuses_it_and_nothing_is_written(self, auth_client):
        error = self.get_error_response(
            auth_client, data=body(packageID="gpu-plain"), status=400, code="invalid_request"
        )
        assert error["details"]["fields"] == {
            "interruptible": ["This package is sold on demand only."]
        }
        assert not GPUUnit.objects.exists()
        assert not Operation.objects.exists()

    def test_a_replay_that_changes_it_is_an_operation_conflict(self, auth_client):
        self.get_success_response(auth_client, data=body(), status=201)
        self.get_success_response(auth_client, data=body(), status=200)
        self.get_error_response(
            auth_client, data=body(interruptible=False), status=409, code="operation_conflict"
        )

    def test_auto_resume_is_for_interruptible_units_only(self, auth_client):
        error = self.get_error_response(
            auth_client,
            data=body(interruptible=False, autoResume=True),
            status=400,
            code="invalid_request",
        )
        assert error["details"]["fields"] == {
            "autoResume": ["Only an interruptible unit is preempted."]
        }
        assert not GPUUnit.objects.exists()
        data = self.get_success_response(
            auth_client, data=body(autoResume=True), status=201
        ).json()["data"]
        assert (data["interruptible"], data["autoResume"]) == (True, True)

    def test_it_must_be_a_boolean(self, auth_client):
        error = self.get_error_response(
            auth_client, data=body(interruptible="maybe"), status=400, code="invalid_request"
        )
        assert "interruptible" in error["details"]["fields"]


def test_an_interruptible_unit_is_billed_at_the_interruptible_price(tenant, packages):
    spot, _plain = packages
    started = periods.floor_hour(timezone.now()) - timedelta(hours=2)
    ended = started + timedelta(hours=1)
    units = {
        interruptible: UnitFactory(
            tenant=tenant,
            name=f"u-{interruptible}".lower(),
            package=spot,
            phase=UnitPhase.RUNNING,
            interruptible=interruptible,
        )
        for interruptible in (True, False)
    }
    for unit in units.values():
        claim = claim_of(1)
        metering.settle_meters([(unit, claim, pod_of("p", started), None)], backstop=False)
        assert Meter.objects.get(unit_uid=unit.uid).alternative == (
            prices.INTERRUPTIBLE if unit.interruptible else ""
        )
        finished = pod_of("p", started, ended)
        metering.settle_meters([(unit, claim, finished, None)], backstop=False)
    cost = {
        interruptible: sum(r.cost for r in UsageRecord.objects.filter(unit_uid=unit.uid))
        for interruptible, unit in units.items()
    }
    assert cost == {True: Decimal("1.20"), False: Decimal("3.60")}

    out = io.BytesIO()
    exporting.copy_to("focus-csv", started - timedelta(hours=1), ended + timedelta(hours=1), out)
    rows = {row["ResourceId"]: row for row in csv.DictReader(io.StringIO(out.getvalue().decode()))}
    assert rows[str(units[True].uid)]["PricingCategory"] == "Dynamic"
    assert rows[str(units[True].uid)]["ListUnitPrice"] == "1.2000"
    assert rows[str(units[False].uid)]["PricingCategory"] == "Standard"


def _two_full_clusters(spot_unit: GPUUnit) -> None:
    """east-1 and west-1 in one region, both full for the package as their mirrors say; on
    west-1 both devices are held by `spot_unit`'s claim (an interruptible unit)."""
    Cluster.objects.all().delete()
    now = timezone.now()
    for name in ("east-1", "west-1"):
        Cluster.objects.create(name=name, region="us-east")
        InventorySnapshot.objects.create(cluster=name, as_of=now, document="{}")
        for package_id in ("gpu-plain", "gpu-spot"):
            PackageAvailability.objects.create(
                cluster=name, package_id=package_id, placeable=0, free_devices=0, reason="full"
            )
    for index in range(2):
        Device.objects.create(
            cluster="west-1",
            driver="gpu.nvidia.com",
            pool="node-w",
            name=f"gpu-{index}",
            node_name="node-w",
            pool_complete=True,
            packages=["gpu-plain", "gpu-spot"],
            content_hash="x",
            allocated=True,
            claim_namespace=spot_unit.namespace,
            claim_name=spot_unit.claim_name,
        )


def test_an_on_demand_order_goes_where_interruptible_units_would_make_room(
    auth_client, tenant, packages
):
    spot, plain = packages
    holder = UnitFactory(
        tenant=tenant,
        name="holder",
        package=spot,
        phase=UnitPhase.RUNNING,
        interruptible=True,
        cluster="west-1",
        region="us-east",
    )
    _two_full_clusters(holder)
    # An interruptible order never takes anything back: no room is no room.
    refused = auth_client.post(
        URL,
        body(operationID="spot-2", name="spot-2", packageID="gpu-spot"),
        format="json",
    )
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "insufficient_capacity"
    # An on-demand one is placed where the interruptible unit would give way, and waits there.
    response = auth_client.post(
        URL,
        {
            k: v
            for k, v in body(packageID=plain.id, name="big", operationID="big").items()
            if k != "interruptible"
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["data"]["cluster"] == "west-1"
