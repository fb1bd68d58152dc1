"""Conflicting lifecycle actions on one unit, concurrently, through a real threaded HTTP
server: stop, start, restart, PATCH and DELETE race each other, and the unit still ends in one
consistent state with every operation either carried out or refused with a clear code."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from controlplane import kube
from runtime.control import reconcile
from runtime.models import GPUUnit, Operation, OperationStatus, UnitPhase
from runtime.tasks import sweep_operations
from tenancy.tests.factories import key_for
from tests.reliability.conftest import post_json

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]

# Every refusal a racing action may meet, and nothing else.
REFUSALS = {"invalid_state", "operation_in_progress", "precondition_failed"}


def send(method: str, url: str, key: str, payload: dict | None, headers: dict | None = None):
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode() if payload is not None else None,
        method=method,
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def settle(unit: GPUUnit, *, timeout: float = 120.0) -> GPUUnit:
    """Sweep and reconcile as beat would until no operation of the unit is open and its
    phase is one a unit rests in."""
    deadline = time.monotonic() + timeout
    while True:
        sweep_operations()
        reconcile.reconcile_units()
        unit.refresh_from_db()
        open_ops = Operation.objects.filter(unit=unit, status__in=OperationStatus.OPEN)
        if not open_ops.exists() and unit.phase in ("Running", "Stopped", "Terminated"):
            return unit
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{unit} did not settle: {unit.phase}/{unit.reason}, open "
                f"{list(open_ops.values_list('kind', 'status'))}"
            )
        time.sleep(0.3)


def objects_of(unit: GPUUnit) -> dict[str, int]:
    selector = f"runtime.lokiwager.io/unit={unit.name}"
    return {
        kind.kind: len(kube.list_objects(kind, namespace=unit.namespace, label_selector=selector))
        for kind in (kube.GPUUNIT, kube.RESOURCECLAIM, kube.POD)
    }


def race(
    base: str, key: str, name: str, actions: list[str], *, round_: int
) -> list[tuple[str, int, dict]]:
    etag = send("GET", f"{base}/{name}", key, None)[1]["data"]["etag"]

    def one(index_action: tuple[int, str]) -> tuple[str, int, dict]:
        index, action = index_action
        operation_id = f"race-{round_}-{index}"
        if action == "delete":
            status, body = send("DELETE", f"{base}/{name}", key, None)
        elif action == "patch":
            patch = {"operationID": operation_id, "image": f"busybox:1.{index}"}
            status, body = send("PATCH", f"{base}/{name}", key, patch, {"If-Match": etag})
        else:
            status, body = post_json(f"{base}/{name}/{action}", key, {"operationID": operation_id})
        return action, status, body

    with ThreadPoolExecutor(max_workers=len(actions)) as pool:
        return list(pool.map(one, enumerate(actions)))


def outcome(results: list[tuple[str, int, dict]]) -> tuple[Counter, Counter]:
    accepted, refused = Counter(), Counter()
    for action, status, body in results:
        if status in (200, 202):
            accepted[action] += 1
        else:
            assert status in (409, 412), (action, status, body)
            assert body["error"]["code"] in REFUSALS, (action, body)
            refused[f"{action}:{body['error']['code']}"] += 1
    return accepted, refused


def check_consistent(unit: GPUUnit) -> dict[str, int]:
    objects = objects_of(unit)
    if unit.phase == UnitPhase.TERMINATED:
        assert objects == {"GPUUnit": 0, "ResourceClaim": 0, "Pod": 0}
    else:
        expected_pods = 1 if unit.phase == UnitPhase.RUNNING else 0
        assert objects == {"GPUUnit": 1, "ResourceClaim": 1, "Pod": expected_pods}, objects
        assert unit.run_policy == ("Running" if expected_pods else "Stopped")
        assert unit.observed_generation == unit.generation
    # Every recorded operation ended: succeeded, or cancelled by the deletion.
    for kind, status, code in Operation.objects.filter(unit=unit).values_list(
        "kind", "status", "error_code"
    ):
        assert status == OperationStatus.SUCCEEDED or code == "cancelled", (kind, status, code)
    return objects


def test_twenty_conflicting_actions_leave_one_consistent_unit(live_server, customer, h100, record):
    tenant = customer.tenant
    key = key_for(tenant)
    base = f"{live_server.url}/api/v1/gpu-units"
    status, _ = post_json(
        base,
        key,
        {"operationID": "c-1", "name": "contested", "packageID": h100.id, "image": "busybox"},
    )
    assert status == 201
    unit = settle(GPUUnit.objects.get(name="contested"))
    assert unit.phase == "Running"

    rounds = {}
    # Round one: stop, start, restart and update race (5 of each, shuffled).
    actions = ["stop", "start", "restart", "patch"] * 5
    random.Random(17).shuffle(actions)
    accepted, refused = outcome(race(base, key, "contested", actions, round_=1))
    unit = settle(unit)
    rounds["without_delete"] = {
        "accepted": dict(accepted),
        "refused": dict(refused),
        "final": unit.phase,
        "objects": check_consistent(unit),
        "operations": Operation.objects.filter(unit=unit).exclude(kind="create").count(),
    }
    assert unit.phase in ("Running", "Stopped")
    # Only what was accepted was recorded; nothing refused left an operation behind.
    assert rounds["without_delete"]["operations"] == sum(accepted.values())

    # Round two: the same race with DELETE in it: the deletion wins, whatever it meets.
    actions = ["stop", "start", "restart", "patch", "delete"] * 4
    random.Random(23).shuffle(actions)
    accepted, refused = outcome(race(base, key, "contested", actions, round_=2))
    assert accepted["delete"] == 4  # repeatable
    unit = settle(unit)
    rounds["with_delete"] = {
        "accepted": dict(accepted),
        "refused": dict(refused),
        "final": unit.phase,
        "objects": check_consistent(unit),
    }
    assert unit.phase == UnitPhase.TERMINATED
    tenant.refresh_from_db()
    assert (tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims) == (0, 0, 0)
    record(requests_per_round=20, **rounds)
