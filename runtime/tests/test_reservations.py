"""Reservations hold real devices (ARCHITECTURE §22), over the simulated cluster and a real
worker: a reservation starting now takes half of the L40S node with a placeholder, another
tenant cannot be allocated those devices, and the owner's order lands on exactly them, handed
over with a taint only its claim tolerates."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import ledger
from billing.models import Meter, MeteredPod, UsageRecord
from controlplane import kube
from inventory.sync import sync_inventory
from runtime import manifests
from runtime.control import preemption
from runtime.control import reservations as reservation_control
from runtime.models import GPUUnit, Reservation, ReservationStatus
from runtime.tests.factories import UnitFactory
from runtime.tests.helpers import (
    l40s_package,
    order_unit,
    remove_namespace_objects,
    wait_for_phase,
    wait_until,
)
from tenancy.models import BudgetMode, Tenant
from tenancy.tests.factories import TenantFactory, key_for
from tests.endpoints import EndpointTest, client_for
from tests.reliability.conftest import post_json

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def _devices(unit: GPUUnit) -> set[str]:
    unit.refresh_from_db()
    return {d["device"] for d in unit.dra.get("devices") or []}


def _placeholder_devices(reservation: Reservation, slot: int) -> set[str]:
    claim = kube.get(
        kube.RESOURCECLAIM, reservation.tenant.namespace, reservation.placeholder_name(slot)
    )
    results = (((claim or {}).get("status") or {}).get("allocation") or {}).get("devices") or {}
    return {r["device"] for r in results.get("results") or []}


def _clean_up(*tenants: Tenant) -> None:
    """What the tenants' units and reservations left in the shared cluster: their namespaces'
    objects and the hand-overs' DeviceTaintRules (cluster-scoped, labelled with the tenant)."""
    kind = kube.device_taint_rule_kind()
    for tenant in tenants:
        remove_namespace_objects(tenant.namespace)
        for rule in kube.list_objects(
            kind, label_selector=f"{manifests.LABEL_TENANT}={tenant.slug}"
        ):
            kube.delete(kind, None, rule["metadata"]["name"])


def _held(reservation: Reservation) -> int:
    reservation_control.run()
    reservation.refresh_from_db()
    return reservation.held


def _order_on(client, name: str, package_id: str, reservation: str):
    """POST an order of `package_id` on `reservation`, answered as it is (a refusal too)."""
    body = {
        "operationID": f"o-{name}",
        "name": name,
        "packageID": package_id,
        "image": "busybox",
        "reservation": reservation,
    }
    return client.post("/api/v1/gpu-units", body, format="json")


def _reserved_now(client, tenant, name: str, package_id: str, *, count: int) -> Reservation:
    """A reservation of `count` units for an hour from now, made through the API, once beat's
    pass has every slot's placeholder holding devices."""
    now = timezone.now()
    body = {
        "name": name,
        "packageID": package_id,
        "count": count,
        "start": now.isoformat(),
        "end": (now + timedelta(hours=1)).isoformat(),
    }
    made = client.post("/api/v1/reservations", body, format="json")
    assert made.status_code == 201, made.json()
    reservation = Reservation.objects.get(tenant=tenant, name=name)
    wait_until(lambda: _held(reservation) == count, "every placeholder to hold devices")
    return reservation


def test_a_reservation_holds_its_devices_for_its_owner_alone(tenant, cluster):
    whole = l40s_package("l40s-4x-r", 4, price="4.00")
    other = TenantFactory()
    owner, stranger = client_for(tenant), client_for(other)
    try:
        sync_inventory()
        now = timezone.now()
        body = {
            "name": "training",
            "packageID": whole.id,
            "count": 1,
            "start": now.isoformat(),
            "end": (now + timedelta(hours=2)).isoformat(),
        }
        made = owner.post("/api/v1/reservations", body, format="json")
        assert made.status_code == 201, made.json()
        assert made.json()["data"]["status"] == "Scheduled"
        assert made.json()["data"]["devices"] == 4
        reservation = Reservation.objects.get(tenant=tenant, name="training")
        assert reservation_control.run() == (1, 0)
        # The placeholder (claim and pause pod, in the owner's namespace) takes 4 devices.
        wait_until(lambda: _held(reservation) == 1, "the placeholder to hold its devices")
        reserved = _placeholder_devices(reservation, 0)
        assert len(reserved) == 4
        shown = owner.get("/api/v1/reservations/training").json()["data"]
        assert (shown["status"], shown["held"], shown["inUse"], shown["free"]) == (
            "Active",
            1,
            0,
            1,
        )

        # Another tenant gets the rest of the node, and no more: its second order waits.
        first = wait_for_phase(order_unit(stranger, "s-1", whole.id), "Running")
        assert not _devices(first) & reserved
        second = wait_for_phase(order_unit(stranger, "s-2", whole.id), "Pending")
        assert not second.dra.get("allocated")

        # Refusals name the field.
        wrong = _order_on(owner, "wrong", whole.id, "nope")
        assert wrong.status_code == 400
        assert "reservation" in wrong.json()["error"]["details"]["fields"]

        # The owner's order lands on exactly the reserved devices, handed over to it: the
        # placeholder goes, and its devices are tainted for the unit's claim alone meanwhile.
        mine = wait_for_phase(
            order_unit(owner, "mine", whole.id, reservation="training"), "Running"
        )
        assert _devices(mine) == reserved
        assert mine.reservation_id == reservation.pk
        assert mine.events.filter(reason="HandingOver").exists()
        assert kube.get(kube.POD, tenant.namespace, reservation.placeholder_name(0)) is None
        # The stranger's waiting unit got none of them.
        second.refresh_from_db()
        assert not second.dra.get("allocated")
        assert owner.get("/api/v1/gpu-units/mine").json()["data"]["reservation"] == "training"
        assert preemption.settle_handovers(now=timezone.now()) == 1
        assert (
            kube.list_objects(
                kube.device_taint_rule_kind(),
                label_selector=f"{manifests.LABEL_HANDOVER}={mine.uid}",
            )
            == []
        )
        shown = owner.get("/api/v1/reservations").json()["data"][0]
        assert (shown["held"], shown["inUse"], shown["free"]) == (1, 1, 0)
        # Its one slot is taken.
        full = _order_on(owner, "again", whole.id, "training")
        assert full.status_code == 409
        assert full.json()["error"]["code"] == "reservation_full"
        # A reservation that started holds its slots to its end: it cannot be cancelled.
        assert owner.delete("/api/v1/reservations/training").status_code == 409
        # The placeholder held the slot from when it was scheduled to the hand-over: the
        # reservation's unused time, in the ledger once its meter closed at the hand-over.
        slot_uid = ledger.slot_resource_uid(reservation.uid, 0)
        assert not Meter.objects.filter(unit_uid=slot_uid).exists()
        followed = MeteredPod.objects.get(unit_uid=slot_uid)  # the placeholder's pod, metered
        assert followed.ended_at is not None  # until the hand-over
        # (Whole seconds, as the cluster dates pods: a hand-over within the placeholder's
        # first second leaves no row.)
        unused = list(UsageRecord.objects.filter(unit_uid=slot_uid))
        assert {r.reservation_status for r in unused} <= {"Unused"}
        assert all(r.start >= reservation.start for r in unused)

        # At its end the unit runs on (atEnd keep) and nothing is held any more.
        reservation_control.run(now=reservation.end + timedelta(seconds=1))
        reservation.refresh_from_db()
        assert reservation.status == ReservationStatus.ENDED
        mine.refresh_from_db()
        assert mine.phase == "Running"
        # The unit's time is the reservation's used time (its meter says so: on a fast
        # machine it may run less than the cluster's whole second, and write no row).
        metered = Meter.objects.get(unit_uid=mine.uid)
        assert (metered.reservation_uid, metered.placeholder) == (reservation.uid, False)
        # One line in time: the placeholder's time ends before the unit's begins (the
        # hand-over between them is nobody's), both at the package's price.
        assert followed.ended_at <= metered.started_at
        assert {r.hourly for r in unused} <= {Decimal("4.0000")}
        assert owner.delete("/api/v1/gpu-units/mine").status_code == 202
        wait_for_phase(mine, "Terminated")
        rows = UsageRecord.objects.filter(unit_uid=mine.uid)
        assert {(r.reservation_uid, r.reservation_status) for r in rows} <= {
            (reservation.uid, "Used")
        }
    finally:
        _clean_up(tenant, other)


def test_reserved_devices_nobody_uses_are_lent_to_an_interruptible_unit_until_the_owner_orders(
    tenant, cluster, settings
):
    settings.PREEMPTION_WAIT_SECONDS = 0  # the scheduler has had its pass once it is Pending
    whole = l40s_package(
        "l40s-4x-lend",
        4,
        price="4.00",
        interruptible=True,
        interruptible_price="1.00",
        preemption_notice_seconds=1,
    )
    stranger, spot = TenantFactory(), TenantFactory()
    owner = client_for(tenant)
    try:
        sync_inventory()
        reservation = _reserved_now(owner, tenant, "lent", whole.id, count=1)
        reserved = _placeholder_devices(reservation, 0)
        # The rest of the node goes to an on-demand unit: no free L40S is left.
        wait_for_phase(order_unit(client_for(stranger), "busy", whole.id), "Running")
        sync_inventory()

        # An interruptible order runs on the reserved devices nobody uses.
        borrower = wait_for_phase(
            order_unit(client_for(spot), "borrower", whole.id, interruptible=True), "Running"
        )
        assert _devices(borrower) == reserved
        shown = client_for(spot).get("/api/v1/gpu-units/borrower").json()["data"]
        assert shown["reservation"] is None  # another tenant's reservation is not shown
        assert owner.get("/api/v1/reservations/lent").json()["data"]["inUse"] == 0

        # The owner orders on it: the borrower is told to give way, with its notice, and the
        # owner's unit lands on exactly the reserved devices.
        mine = wait_for_phase(order_unit(owner, "mine", whole.id, reservation="lent"), "Pending")
        assert mine.events.filter(reason="HandingOver").exists()
        # The borrower's own hand-over (its taints on these devices) ended with it, before
        # beat's pass: they would keep the devices from the owner's unit too.
        borrower.refresh_from_db()
        assert borrower.handover == {}
        assert borrower.events.filter(reason="HandoverEnded").exists()
        assert preemption.give_notice(now=timezone.now()) == 1
        borrower.refresh_from_db()
        assert borrower.preemption["for"] == str(mine.uid)
        preempt_at = datetime.fromisoformat(borrower.preemption["preemptAt"])
        assert preemption.carry_out(now=preempt_at) == 1
        wait_for_phase(borrower, "Preempted")
        mine = wait_for_phase(mine, "Running")
        assert _devices(mine) == reserved
        borrower.refresh_from_db()
        assert borrower.reservation_id is None  # the slot went back
        assert owner.get("/api/v1/reservations/lent").json()["data"]["inUse"] == 1
    finally:
        _clean_up(tenant, stranger, spot)


def test_a_borrower_that_stops_gives_the_lent_slot_back_to_a_placeholder(tenant, cluster):
    """Issue 40, hole 3: a stopped borrower held the owner's slot without its devices, so no
    placeholder was made again and anyone could take them. Now the slot comes back at once."""
    whole = l40s_package(
        "l40s-4x-back", 4, price="4.00", interruptible=True, interruptible_price="1.00"
    )
    stranger, spot = TenantFactory(), TenantFactory()
    owner = client_for(tenant)
    try:
        sync_inventory()
        reservation = _reserved_now(owner, tenant, "back", whole.id, count=1)
        reserved = _placeholder_devices(reservation, 0)
        wait_for_phase(order_unit(client_for(stranger), "busy", whole.id), "Running")
        sync_inventory()
        borrower = wait_for_phase(
            order_unit(client_for(spot), "borrower", whole.id, interruptible=True), "Running"
        )
        assert _devices(borrower) == reserved
        assert _placeholder_devices(reservation, 0) == set()  # the borrower has them

        stopped = client_for(spot).post(
            "/api/v1/gpu-units/borrower/stop", {"operationID": "stop-b"}, format="json"
        )
        assert stopped.status_code == 202, stopped.json()
        wait_for_phase(borrower, "Stopped")
        preemption.run()  # beat's pass: the borrower's own hand-over of the slot ends
        reservation_control.run()

        borrower.refresh_from_db()
        assert (borrower.reservation_id, borrower.reservation_slot) == (None, None)
        assert borrower.events.filter(reason="LentSlotReturned").exists()
        # The owner's reservation is not named to the borrower (issue 41, item 8).
        said = list(borrower.events.values_list("message", flat=True))
        assert not [m for m in said if "reservation back" in m], said
        wait_until(
            lambda: _held(reservation) == 1, "the placeholder to hold the slot again", timeout=60
        )
        assert _placeholder_devices(reservation, 0) == reserved
    finally:
        _clean_up(tenant, stranger, spot)


def test_the_owner_s_stopped_unit_keeps_its_slot_held_and_takes_it_back_at_start(tenant, cluster):
    """Issue 40, hole 3: the owner's stopped unit let its slot's devices go to the pool. Now a
    placeholder holds them again (billed as the slot's unused time) until the unit starts and
    takes them back through the same hand-over."""
    whole = l40s_package("l40s-4x-own", 4, price="4.00")
    owner = client_for(tenant)
    try:
        sync_inventory()
        reservation = _reserved_now(owner, tenant, "own", whole.id, count=1)
        reserved = _placeholder_devices(reservation, 0)
        mine = wait_for_phase(order_unit(owner, "mine", whole.id, reservation="own"), "Running")
        assert _devices(mine) == reserved
        preemption.settle_handovers(now=timezone.now())

        stopped = owner.post("/api/v1/gpu-units/mine/stop", {"operationID": "s1"}, format="json")
        assert stopped.status_code == 202, stopped.json()
        wait_for_phase(mine, "Stopped")
        mine.refresh_from_db()
        assert mine.reservation_slot == 0  # still its slot
        wait_until(lambda: _held(reservation) == 1, "a placeholder to hold the slot again")
        again = _placeholder_devices(reservation, 0)
        assert len(again) == 4
        slot_uid = ledger.slot_resource_uid(reservation.uid, 0)
        assert Meter.objects.get(unit_uid=slot_uid).placeholder

        started = owner.post("/api/v1/gpu-units/mine/start", {"operationID": "s2"}, format="json")
        assert started.status_code == 202, started.json()
        wait_for_phase(mine, "Running")
        assert _devices(mine) == again  # exactly what the placeholder held
        assert mine.events.filter(reason="HandingOver").count() == 2
        assert kube.get(kube.POD, tenant.namespace, reservation.placeholder_name(0)) is None
        assert not Meter.objects.filter(unit_uid=slot_uid).exists()  # its time ended there
        reservation_control.run()
        assert kube.get(kube.POD, tenant.namespace, reservation.placeholder_name(0)) is None
    finally:
        _clean_up(tenant)


def test_a_slot_that_holds_no_devices_is_not_billed(tenant, cluster):
    """Issue 40, hole 4: every slot was billed for the whole window, held or not. Now a slot
    whose placeholder waits for devices bills nothing until it holds them."""
    whole = l40s_package("l40s-4x-wait", 4, price="4.00")
    stranger = TenantFactory()
    owner = client_for(tenant)
    try:
        sync_inventory()
        busy = wait_for_phase(order_unit(client_for(stranger), "busy", whole.id), "Running")
        # Two slots from a moment from now: only one fits beside the stranger's unit.
        start = timezone.now() + timedelta(seconds=2)
        body = {
            "name": "half",
            "packageID": whole.id,
            "count": 2,
            "start": start.isoformat(),
            "end": (start + timedelta(hours=1)).isoformat(),
        }
        made = owner.post("/api/v1/reservations", body, format="json")
        assert made.status_code == 201, made.json()
        reservation = Reservation.objects.get(tenant=tenant, name="half")
        wait_until(lambda: _held(reservation) == 1, "one placeholder to hold devices")
        held = [s for s in (0, 1) if _placeholder_devices(reservation, s)]
        assert len(held) == 1
        waiting = 1 - held[0]
        uids = {s: ledger.slot_resource_uid(reservation.uid, s) for s in (0, 1)}
        assert Meter.objects.filter(unit_uid=uids[held[0]], placeholder=True).exists()
        assert not Meter.objects.filter(unit_uid=uids[waiting]).exists()

        # The stranger's unit goes: the waiting slot holds its devices from then on.
        assert client_for(stranger).delete("/api/v1/gpu-units/busy").status_code == 202
        wait_for_phase(busy, "Terminated")
        released = max(r.end for r in UsageRecord.objects.filter(unit_uid=busy.uid))
        wait_until(lambda: _held(reservation) == 2, "the second placeholder to hold devices")
        meter = Meter.objects.get(unit_uid=uids[waiting])
        # (The cluster dates the placeholder's scheduling to the whole second.)
        assert meter.started_at >= released.replace(microsecond=0)
        assert not UsageRecord.objects.filter(unit_uid=uids[waiting]).exists()
    finally:
        _clean_up(tenant, stranger)


def test_twenty_concurrent_orders_against_a_reservation_and_free_capacity(
    live_server, tenant, cluster
):
    """Twenty orders at once over real HTTP: ten of the owner's on its two-slot reservation,
    five of the owner's and five of a stranger's on the node's free half (room for two
    more units). Two orders take the two slots, distinct; the others on it are refused
    `reservation_full`; the stranger's that names the reservation is refused; no device is
    allocated twice, and no unit but the slots' holds a reserved device."""
    pair = l40s_package("l40s-2x-race", 2, price="2.00")
    other = TenantFactory()
    try:
        sync_inventory()
        reservation = _reserved_now(client_for(tenant), tenant, "race", pair.id, count=2)
        reserved = _placeholder_devices(reservation, 0) | _placeholder_devices(reservation, 1)
        assert len(reserved) == 4

        url = f"{live_server.url}/api/v1/gpu-units"
        owner_key, stranger_key = key_for(tenant), key_for(other)

        def order(i: int, key: str, **extra) -> dict:
            return {
                "operationID": f"race-{i}",
                "name": f"race-{i}",
                "packageID": pair.id,
                "image": "busybox",
                **extra,
            }

        calls = [(owner_key, order(i, owner_key, reservation="race")) for i in range(10)]
        calls += [(owner_key, order(i, owner_key)) for i in range(10, 15)]
        calls += [(stranger_key, order(i, stranger_key)) for i in range(15, 19)]
        calls += [(stranger_key, order(19, stranger_key, reservation="race"))]
        with ThreadPoolExecutor(max_workers=20) as pool:
            results = list(pool.map(lambda call: post_json(url, *call), calls))
        on_it = [status for status, _ in results[:10]]
        assert sorted(on_it) == [201, 201] + [409] * 8, on_it
        assert {body["error"]["code"] for status, body in results[:10] if status == 409} == {
            "reservation_full"
        }
        assert [status for status, _ in results[10:19]] == [201] * 9
        assert results[19][0] == 400  # not the stranger's reservation
        assert "reservation" in results[19][1]["error"]["details"]["fields"]

        slots = sorted(
            GPUUnit.objects.filter(reservation=reservation).values_list(
                "reservation_slot", flat=True
            )
        )
        assert slots == [0, 1]
        assert not GPUUnit.objects.filter(tenant=other, reservation__isnull=False).exists()
        # The two on it run on exactly the reserved devices; two more units fit the free half.
        mine = list(GPUUnit.objects.filter(reservation=reservation))
        for unit in mine:
            wait_for_phase(unit, "Running")
        assert set().union(*(_devices(unit) for unit in mine)) == reserved
        wait_until(
            lambda: (
                GPUUnit.objects.filter(reservation__isnull=True, dra__allocated=True).count() == 2
            ),
            "two of the others to be allocated the free half",
        )
        # No device allocated twice, across every claim in the cluster.
        allocated = [
            (result["pool"], result["device"])
            for claim in kube.list_objects(kube.RESOURCECLAIM)
            for result in (
                ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
            ).get("results")
            or []
        ]
        assert len(allocated) == len(set(allocated))
        others = GPUUnit.objects.filter(reservation__isnull=True)
        assert not set().union(*(_devices(unit) for unit in others)) & reserved
    finally:
        _clean_up(tenant, other)


def test_a_reservation_that_has_not_started_is_cancelled_and_holds_nothing(tenant, cluster):
    package = l40s_package("l40s-2x-r", 2, price="2.00")
    client = client_for(tenant)
    sync_inventory()
    start = timezone.now() + timedelta(days=1)
    body = {
        "name": "tomorrow",
        "packageID": package.id,
        "count": 2,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=4)).isoformat(),
        "atEnd": "stop",
    }
    assert client.post("/api/v1/reservations", body, format="json").status_code == 201
    assert reservation_control.run() == (0, 0)  # not yet
    taken = client.post("/api/v1/reservations", body, format="json")
    assert taken.status_code == 409
    assert taken.json()["error"]["code"] == "reservation_conflict"
    cancelled = client.delete("/api/v1/reservations/tomorrow")
    assert cancelled.status_code == 200
    assert cancelled.json()["data"]["status"] == "Cancelled"
    assert reservation_control.run(now=start + timedelta(minutes=1)) == (0, 0)
    assert (
        kube.list_objects(
            kube.RESOURCECLAIM,
            namespace=tenant.namespace,
            label_selector=manifests.LABEL_RESERVATION,
        )
        == []
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "Not A Label!"}, "name"),
        ({"packageID": "no-such-package"}, "packageID"),
        ({"count": 0}, "count"),
        ({"start": "2020-01-01T00:00:00Z"}, "start"),
        ({"end": "2020-01-01T00:00:00Z"}, "end"),
        ({"atEnd": "explode"}, "atEnd"),
        ({"region": "atlantis"}, "region"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_a_bad_reservation_is_refused_naming_the_field(tenant, change, field):
    package = l40s_package("l40s-1x-r", 1, price="1.00")
    start = timezone.now() + timedelta(hours=1)
    body = {
        "name": "ok",
        "packageID": package.id,
        "count": 1,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=1)).isoformat(),
        **change,
    }
    refused = client_for(tenant).post("/api/v1/reservations", body, format="json")
    assert refused.status_code == 400, refused.json()
    assert field in refused.json()["error"]["details"]["fields"]
    assert not Reservation.objects.filter(tenant=tenant).exists()


def _later(name: str, package_id: str, **fields) -> dict:
    start = timezone.now() + timedelta(hours=1)
    return {
        "name": name,
        "packageID": package_id,
        "count": 1,
        "start": start.isoformat(),
        "end": (start + timedelta(hours=1)).isoformat(),
        **fields,
    }


class TestReservationCreate(EndpointTest):
    method = "post"
    path = "/api/v1/reservations"

    def test_reserved_devices_count_against_the_device_quota(self):
        package = l40s_package("l40s-2x-q", 2, price="2.00")
        tenant = TenantFactory(quota_devices={"nvidia-l40s": 4})
        client = client_for(tenant)
        self.get_success_response(client, data=_later("a", package.id), status=201)
        error = self.get_error_response(
            client, data=_later("b", package.id, count=2), status=409, code="quota_exceeded"
        )
        assert error["details"]["limit"] == "nvidia-l40s.deviceclass.resource.k8s.io/devices"
        # The one free slot left counts for units ordered without it, too.
        self.get_success_response(client, data=_later("b", package.id), status=201)
        refused = client.post(
            "/api/v1/gpu-units",
            {"operationID": "q-1", "name": "q", "packageID": package.id, "image": "busybox"},
            format="json",
        )
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "quota_exceeded"

    def test_a_spent_enforced_budget_refuses_a_reservation(self):
        """Issue 40, hole 4: a reservation is spending, refused as an order is."""
        package = l40s_package("l40s-2x-b", 2, price="2.00")
        tenant = TenantFactory()
        Tenant.objects.filter(pk=tenant.pk).update(
            budget_mode=BudgetMode.ENFORCE,
            monthly_budget=Decimal("10"),
            budget_exceeded_at=timezone.now(),
        )
        self.get_error_response(
            client_for(tenant), data=_later("a", package.id), status=409, code="budget_exceeded"
        )
        assert not Reservation.objects.filter(tenant=tenant).exists()

    def test_the_region_quota_and_the_count_per_tenant_hold(self, settings):
        package = l40s_package("l40s-2x-r", 2, price="2.00")
        tenant = TenantFactory()
        Tenant.objects.filter(pk=tenant.pk).update(quota_regions={settings.CLUSTER_REGION: 2})
        client = client_for(tenant)
        error = self.get_error_response(
            client, data=_later("big", package.id, count=2), status=409, code="quota_exceeded"
        )
        assert error["details"]["limit"] == f"devices in region {settings.CLUSTER_REGION}"
        # Reservations count in the region quota as units do: one fills it.
        self.get_success_response(client, data=_later("one", package.id), status=201)
        self.get_error_response(
            client, data=_later("two", package.id), status=409, code="quota_exceeded"
        )
        regions = client.get("/api/v1/quota").json()["data"]["regions"]
        assert regions[settings.CLUSTER_REGION]["used"] == "2"
        settings.RESERVATIONS_PER_TENANT = 2
        other = client_for(TenantFactory())
        for name in ("a", "b"):
            self.get_success_response(other, data=_later(name, package.id), status=201)
        error = self.get_error_response(
            other, data=_later("c", package.id), status=409, code="limit_exceeded"
        )
        assert (error["details"]["used"], error["details"]["hard"]) == (2, 2)

    def test_an_enforced_budget_refuses_one_that_would_pass_it(self):
        """Issue 40, hole 4: a reservation committing more than the budget has left."""
        package = l40s_package("l40s-2x-e", 2, price="2.00")
        tenant = TenantFactory()
        Tenant.objects.filter(pk=tenant.pk).update(
            budget_mode=BudgetMode.ENFORCE, monthly_budget=Decimal("3")
        )
        client = client_for(tenant)
        error = self.get_error_response(
            client, data=_later("dear", package.id, count=2), status=409, code="budget_exceeded"
        )
        # Two slots for an hour at 2.00 (within this month unless it ends within the hour).
        assert error["details"]["limit"] == "3.00"
        assert Decimal(error["details"]["requested"]) > Decimal("3")
        assert not Reservation.objects.filter(tenant=tenant).exists()
        self.get_success_response(client, data=_later("cheap", package.id), status=201)

    def test_its_commitment_shows_in_budget_quota_and_statement_at_once(self):
        package = l40s_package("l40s-2x-c", 2, price="2.00")
        tenant = TenantFactory()
        client = client_for(tenant)
        self.get_success_response(client, data=_later("soon", package.id, count=3), status=201)
        # Three slots for an hour at 2.00 (its start an hour from now, the price in force now).
        quota = client.get("/api/v1/quota").json()["data"]
        assert quota["committed"] == "6.000000"
        month = timezone.now().strftime("%Y-%m")
        statement = client.get(f"/api/v1/usage/statements/{month}").json()["data"]
        budget = client.get("/api/v1/budget").json()["data"]
        if (timezone.now() + timedelta(hours=2)).strftime("%Y-%m") == month:
            assert budget["committed"] == "6.000000"
            assert Decimal(budget["forecast"]) >= Decimal("6.00")
            assert [(c["reservation"], c["slots"], c["cost"]) for c in statement["committed"]] == [
                ("soon", 3, "6.000000")
            ]
        assert Decimal(statement["total"]) == 0  # nothing billed yet
        assert client.delete("/api/v1/reservations/soon").status_code == 200
        assert Decimal(client.get("/api/v1/quota").json()["data"]["committed"]) == 0

    def test_statements_are_the_baseline(self, auth_client):
        package = l40s_package("l40s-1x-s", 1, price="1.00")
        auth_client.get("/api/v1/reservations")
        self.assert_statement_count(auth_client, data=_later("a", package.id))


class TestReservationList(EndpointTest):
    path = "/api/v1/reservations"

    def test_statements_are_the_baseline_whatever_the_count(self, auth_client):
        package = l40s_package("l40s-1x-s", 1, price="1.00")
        for name in ("a", "b", "c"):
            auth_client.post(self.path, _later(name, package.id), format="json")
        self.assert_statement_count(auth_client)
        data = self.get_success_response(auth_client).json()["data"]
        assert [r["name"] for r in data] == ["a", "b", "c"]
        # A page at a time, by name (issue 40).
        first = self.get_success_response(auth_client, query={"limit": 2}).json()
        assert [r["name"] for r in first["data"]] == ["a", "b"]
        cursor = first["meta"]["nextCursor"]
        rest = self.get_success_response(auth_client, query={"limit": 2, "cursor": cursor}).json()
        assert ([r["name"] for r in rest["data"]], rest["meta"]["nextCursor"]) == (["c"], None)
        assert {(r["status"], r["held"], r["inUse"], r["free"]) for r in data} == {
            ("Scheduled", 0, 0, 1)
        }


class TestReservationDetail(EndpointTest):
    path = "/api/v1/reservations/{name}"

    def test_another_tenant_s_reservation_is_404(self, auth_client):
        package = l40s_package("l40s-1x-s", 1, price="1.00")
        auth_client.post("/api/v1/reservations", _later("a", package.id), format="json")
        self.get_error_response(client_for(TenantFactory()), status=404, code="not_found", name="a")

    def test_statements_are_the_baseline(self, auth_client):
        package = l40s_package("l40s-1x-s", 1, price="1.00")
        auth_client.post("/api/v1/reservations", _later("a", package.id), format="json")
        self.assert_statement_count(auth_client, name="a")


class TestReservationDelete(EndpointTest):
    method = "delete"
    path = "/api/v1/reservations/{name}"

    def test_statements_are_the_baseline(self, auth_client):
        package = l40s_package("l40s-1x-s", 1, price="1.00")
        auth_client.post("/api/v1/reservations", _later("a", package.id), format="json")
        auth_client.get("/api/v1/reservations")
        self.assert_statement_count(auth_client, name="a")


def test_at_its_end_a_reservation_ordered_to_stop_stops_its_units(tenant, cluster, settings):
    package = l40s_package("l40s-1x-end", 1, price="1.00")
    now = timezone.now()
    reservation = Reservation.objects.create(
        tenant=tenant,
        name="ends",
        package=package,
        count=1,
        start=now - timedelta(hours=1),
        end=now,
        at_end="stop",
        cluster=settings.CLUSTER_NAME,
        region=settings.CLUSTER_REGION,
        status=ReservationStatus.ACTIVE,
        held=1,
    )
    unit = UnitFactory(
        tenant=tenant,
        package=package,
        reservation=reservation,
        reservation_slot=0,
        phase="Running",
        unit_k8s_uid="made-in-the-cluster",  # a unit whose objects were made can be stopped
    )
    assert reservation_control.run(now=now + timedelta(seconds=1)) == (0, 1)
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.ENDED
    assert "1 unit(s) stopped" in reservation.message
    stop = unit.operations.get(kind="stop")
    assert stop.operation_id.startswith("@reservationend-")
