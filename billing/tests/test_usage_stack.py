"""The ledger through the stack: the API, a real Celery worker, the simulated cluster, the
observer and the reconcile that beat runs (wait_for_phase runs it). A unit's usage is what its
pod held, from when the cluster says it started to when it says the devices were released, at
the price in force, its alternative's or its share's."""

from __future__ import annotations

import itertools
import time
from datetime import datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import periods
from billing.models import Meter, PriceVersion, QuantityUnit, UsageRecord
from billing.tests.helpers import package
from catalog.models import Package
from runtime import manifests
from runtime.models import GPUUnit, UnitPhase
from runtime.tests.helpers import order_unit, wait_for_phase, wait_until
from runtime.tests.test_observer import observer  # noqa: F401 (a fixture)
from tests.endpoints import client_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker", "observer", "audited_stack"),
]


def order(client, name: str, package: str) -> GPUUnit:
    return order_unit(client, name, package, operation_id=f"create-{name}")


def stop(client, unit: GPUUnit) -> float:
    """Stop the unit and wait until it is Stopped; the time the stop was asked for."""
    asked = time.time()
    response = client.post(
        f"/api/v1/gpu-units/{unit.name}/stop", {"operationID": f"stop-{unit.name}"}, format="json"
    )
    assert response.status_code == 202, response.json()
    wait_for_phase(unit, UnitPhase.STOPPED)
    return asked


def rows_of(unit: GPUUnit) -> list[UsageRecord]:
    """The unit's records, once its meter is closed."""
    wait_until(lambda: not Meter.objects.filter(unit_uid=unit.uid).exists(), "meter closed")
    return list(UsageRecord.objects.filter(unit_uid=unit.uid).order_by("start"))


def test_a_container_ignoring_sigterm_is_billed_until_its_pod_is_gone(tenant, cluster):
    package(article=True, price="0.36", termination_grace_seconds=3)
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "stubborn", "gpu-rtx3080-2x-cpu10-mem40g"), "Running")
    cluster.on_sigterm(unit.namespace, manifests.pod_name_for(unit.name), ignore=True)

    asked = stop(client, unit)

    rows = rows_of(unit)
    end = rows[-1].end.timestamp()
    # Billed until the kubelet killed it when its 3 s grace ran out, not until the request
    # (the cluster's times are whole seconds).
    assert abs(end - (asked + 3)) <= 1, end - asked
    stopping = unit.events.get(reason="StopRequested")
    assert "billed until" in stopping.message


def _restarts(cluster, unit: GPUUnit) -> int:
    pod = cluster.pod(unit.namespace, manifests.pod_name_for(unit.name))
    [status] = [
        s for s in pod["status"]["containerStatuses"] if s["name"] == manifests.CONTAINER_NAME
    ]
    return int(status.get("restartCount") or 0)


def _held_throughout(
    unit: GPUUnit, started: datetime, restarted: datetime, asked: float
) -> list[UsageRecord]:
    """The unit's records, once stopped: one pod metered, from its first container's start,
    with no gap, until the stop asked at `asked` (after the container's last restart)."""
    rows = rows_of(unit)
    assert rows[0].start == started, (rows[0].start, started)
    for earlier, later in itertools.pairwise(rows):
        assert earlier.end == later.start, (earlier, later)  # no hole at an exit
    # The cluster's times are whole seconds.
    assert rows[-1].end >= restarted, rows[-1]
    assert rows[-1].end.timestamp() >= int(asked), rows[-1]
    assert len({row.claim_uid for row in rows}) == 1
    assert unit.events.filter(reason="UsageStarted").count() == 1
    assert unit.events.filter(reason="UsageEnded").count() == 1
    return rows


def test_a_container_that_exits_and_restarts_twice_is_billed_for_its_whole_time(tenant, cluster):
    """Exits inside the pod (restartPolicy Always) release nothing: the pod holds its claim,
    and is billed from its first container's start until it is gone (issue 40, hole 1)."""
    package(article=True, price="0.36")
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "restarts", "gpu-rtx3080-2x-cpu10-mem40g"), "Running")
    wait_until(lambda: Meter.objects.filter(unit_uid=unit.uid).exists(), "meter open")
    pod = manifests.pod_name_for(unit.name)
    first = cluster.pod(unit.namespace, pod)["status"]["containerStatuses"][0]
    started = datetime.fromisoformat(first["state"]["running"]["startedAt"])

    cluster.fail_container(unit.namespace, pod, exit_code=3)
    wait_for_phase(unit, "Running")
    again = cluster.fail_container(unit.namespace, pod, oom=True)
    wait_for_phase(unit, "Running")
    [status] = again["status"]["containerStatuses"]
    assert status["restartCount"] == 2
    restarted = datetime.fromisoformat(status["state"]["running"]["startedAt"])
    wait_until(lambda: Meter.objects.filter(unit_uid=unit.uid).exists(), "still metered")

    asked = stop(client, unit)

    _held_throughout(unit, started, restarted, asked)


def test_a_crash_looping_unit_is_billed_while_its_pod_holds_the_devices(tenant, cluster):
    package(article=True, price="0.36")
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "loops", "gpu-rtx3080-2x-cpu10-mem40g"), "Running")
    wait_until(lambda: Meter.objects.filter(unit_uid=unit.uid).exists(), "meter open")
    pod = manifests.pod_name_for(unit.name)
    first = cluster.pod(unit.namespace, pod)["status"]["containerStatuses"][0]
    started = datetime.fromisoformat(first["state"]["running"]["startedAt"])
    cluster.api.patch(
        "v1",
        "Pod",
        pod,
        {"metadata": {"annotations": {"devstack.lokiwager.io/backoff": "1s"}}},
        unit.namespace,
    )

    cluster.chaos("Pod", pod, "crash-loop", unit.namespace)
    wait_for_phase(unit, "Failed")  # ContainerCrashLoop, its devices still held
    wait_until(lambda: _restarts(cluster, unit) >= 2, "two crashes")
    cluster.chaos("Pod", pod, None, unit.namespace)
    wait_for_phase(unit, "Running")
    status = cluster.pod(unit.namespace, pod)["status"]["containerStatuses"][0]
    restarted = datetime.fromisoformat(status["state"]["running"]["startedAt"])

    asked = stop(client, unit)

    _held_throughout(unit, started, restarted, asked)


def test_a_deleted_units_timeline_bills_its_end_before_it_says_terminated(tenant, cluster):
    """Issue 40, item 6: the timeline ends with the end of billing, then Terminated."""
    package(article=True, price="0.36")
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "brief", "gpu-rtx3080-2x-cpu10-mem40g"), "Running")
    wait_until(lambda: Meter.objects.filter(unit_uid=unit.uid).exists(), "meter open")

    assert client.delete("/api/v1/gpu-units/brief").status_code == 202

    wait_for_phase(unit, "Terminated")
    reasons = list(unit.events.order_by("id").values_list("reason", flat=True))
    assert reasons[-2:] == ["UsageEnded", "Terminated"], reasons
    # (A unit deleted within its first second of running has no rows: the cluster's times are
    # whole seconds.)
    assert not Meter.objects.filter(unit_uid=unit.uid).exists()


def test_a_unit_run_for_n_seconds_then_stopped_has_n_seconds_times_its_devices(tenant):
    package(article=True, price="0.36")  # RTX 3080 x2
    client = client_for(tenant)
    ordered = time.time()
    unit = wait_for_phase(order(client, "timed", "gpu-rtx3080-2x-cpu10-mem40g"), "Running")
    running_seen = time.time()
    held_devices = {d["device"] for d in unit.dra["devices"]}
    assert len(held_devices) == 2
    wait_until(lambda: Meter.objects.filter(unit_uid=unit.uid).exists(), "meter open")
    time.sleep(3)
    asked = stop(client, unit)
    stopped = time.time()
    rows = rows_of(unit)
    assert rows
    held = float(sum((row.seconds for row in rows), Decimal(0)))
    # The pod started between the order and Running and ended between the stop request and
    # Stopped, in the cluster's whole seconds.
    assert asked - running_seen - 1 < held < stopped - ordered + 1, (held, asked - running_seen)
    assert sum((row.quantity for row in rows), Decimal(0)) == 2 * sum(
        (row.seconds for row in rows), Decimal(0)
    )
    assert {row.quantity_unit for row in rows} == {QuantityUnit.DEVICE_SECONDS}
    assert {row.hourly for row in rows} == {Decimal("0.36")}
    assert {d["device"] for d in rows[0].devices} == held_devices
    assert rows[0].claim_uid == unit.claim_k8s_uid
    # The unit's JSON says what it cost: the rows' sum.
    shown = client.get("/api/v1/gpu-units/timed").json()["data"]["costToDate"]
    assert Decimal(shown) == sum((row.cost for row in rows), Decimal(0))
    # Stopped, it costs nothing more.
    time.sleep(0.5)
    assert client.get("/api/v1/gpu-units/timed").json()["data"]["costToDate"] == shown


def test_a_price_change_mid_run_splits_the_cost_at_the_change(tenant):
    package_id = package(article=True, price="0.36").id
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "repriced", package_id), "Running")
    time.sleep(1.5)
    repriced = Package.objects.get(pk=package_id)
    repriced.price = Decimal("7.20")
    repriced.full_clean()
    repriced.save()  # as the admin saves it
    change = PriceVersion.objects.get(package_id=package_id, hourly=Decimal("7.20"))
    time.sleep(1.5)
    stop(client, unit)
    rows = rows_of(unit)
    before = [row for row in rows if row.end <= change.effective_from]
    after = [row for row in rows if row.start >= change.effective_from]
    assert before
    assert after
    assert len(before) + len(after) == len(rows)  # no row spans the change
    assert {row.hourly for row in before} == {Decimal("0.36")}
    assert {row.hourly for row in after} == {Decimal("7.20")}
    assert {row.price_version_id for row in after} == {change.pk}
    # The old price's rows were not rewritten by the change.
    assert before[-1].end == change.effective_from == after[0].start


def test_a_fallback_unit_is_billed_at_its_alternatives_price(tenant):
    package(
        id="b200-else-l40s",
        device_class_name="nvidia-h100",
        selectors=['device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"'],
        gpu=1,
        count=1,
        cpu="4",
        memory="16Gi",
        price="6.00",
        alternatives=[{"name": "l40s", "deviceClassName": "nvidia-l40s", "count": 1}],
        alternative_prices={"l40s": "1.19"},
    )
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "fallen-back", "b200-else-l40s"), "Running")
    assert unit.dra["alternative"] == "l40s"
    time.sleep(1)
    stop(client, unit)
    rows = rows_of(unit)
    assert {(row.alternative, row.hourly) for row in rows} == {("l40s", Decimal("1.19"))}


def test_a_shared_unit_is_billed_by_its_share(tenant):
    package(
        id="h100-quarter",
        device_class_name="hami-core-gpu.project-hami.io",
        gpu=1,
        count=1,
        cpu="4",
        memory="16Gi",
        capacity={"cores": "25", "memory": "20Gi"},
        price="0.69",
    )
    client = client_for(tenant)
    unit = wait_for_phase(order(client, "quarter", "h100-quarter"), "Running")
    time.sleep(1)
    stop(client, unit)
    rows = rows_of(unit)
    assert {row.quantity_unit for row in rows} == {QuantityUnit.SHARE_SECONDS}
    assert {row.hourly for row in rows} == {Decimal("0.69")}
    (device,) = rows[0].devices
    assert device["shareID"]
    assert device["consumedCapacity"] == {"cores": "25", "memory": "20Gi"}
    assert sum((row.quantity for row in rows), Decimal(0)) == sum(
        (row.seconds for row in rows), Decimal(0)
    )
    # From the month the unit ran in: the default is the request's month, which holds none of
    # its usage when a UTC month ends between the stop and the request.
    since = periods.month_start(rows[0].start).isoformat()
    usage = client.get(
        "/api/v1/usage", {"groupBy": "unit", "from": since, "to": timezone.now().isoformat()}
    )
    (item,) = usage.json()["data"]["items"]
    assert Decimal(item["shareSeconds"]) > 0
    assert item["deviceSeconds"] == "0.000"
