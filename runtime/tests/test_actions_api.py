"""Stop, start, restart and PATCH at the API, database only (no worker takes what they
queue): the phase table, the refusals, idempotency, the statement-count baseline; and the pure
merge-patch and duration rules."""

from __future__ import annotations

import pytest
from django.utils import timezone

from billing import ledger
from billing.tests.helpers import holding
from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from controlplane.validation import format_duration, parse_duration
from runtime import actions, lifecycle, orders
from runtime.models import GPUUnit, Operation, OperationKind, UnitPhase
from tests.endpoints import EndpointTest

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def package(db):
    return PackageFactory(article=True)


def provisioned(tenant, name: str = "demo", *, phase: str = UnitPhase.RUNNING) -> GPUUnit:
    """A unit whose create is done and objects recorded, in `phase`."""
    unit = orders.create_unit(
        tenant=tenant,
        operation_id=f"create-{name}",
        name=name,
        package_id=ARTICLE_PACKAGE_ID,
        image="busybox",
    ).unit
    Operation.objects.filter(unit=unit).update(status="succeeded")
    GPUUnit.objects.filter(pk=unit.pk).update(
        phase=phase, unit_k8s_uid="u-1", observed_generation=1
    )
    unit.refresh_from_db()
    if phase == UnitPhase.RUNNING:
        # As the reconcile does when it sees the pod run: the unit's usage is being metered.
        ledger.open_meter(holding(unit), at=timezone.now())
    return unit


def post(client, name: str, action: str, operation_id: str = "op-1"):
    return client.post(
        f"/api/v1/gpu-units/{name}/{action}", {"operationID": operation_id}, format="json"
    )


# docs/api.md's table: which action each phase accepts (the rest is invalid_state).
ACCEPTS = {
    UnitPhase.PROVISIONING: {"stop", "restart"},
    UnitPhase.PENDING: {"stop", "restart"},
    UnitPhase.RUNNING: {"stop", "restart"},
    UnitPhase.FAILED: {"stop", "restart"},
    UnitPhase.STOPPED: {"start"},
    UnitPhase.TERMINATING: set(),
    UnitPhase.TERMINATED: set(),
}


@pytest.mark.parametrize("phase", list(ACCEPTS))
@pytest.mark.parametrize("action", ["stop", "start", "restart"])
def test_each_phase_accepts_what_the_table_says(auth_client, tenant, phase, action):
    provisioned(tenant, phase=phase)
    response = post(auth_client, "demo", action)
    if action in ACCEPTS[phase]:
        assert response.status_code == 202, response.json()
        assert Operation.objects.filter(kind=action).count() == 1
    else:
        assert response.status_code == 409, response.json()
        error = response.json()["error"]
        assert error["code"] == "invalid_state"
        assert error["details"]["phase"] == phase
        assert not Operation.objects.filter(kind=action).exists()


def test_stop_start_move_the_tenants_cpu_and_memory_not_its_claim(auth_client, tenant):
    unit = provisioned(tenant)
    tenant.refresh_from_db()
    charged = (tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims)
    assert post(auth_client, "demo", "stop").status_code == 202
    unit.refresh_from_db()
    assert (unit.phase, unit.reason, unit.run_policy, unit.generation) == (
        "Stopping",
        "StopRequested",
        "Stopped",
        2,
    )
    # Given back once Stopped (the worker's part, done here as it would).
    lifecycle.mark_unit_stopped(unit, Operation.objects.get(kind="stop"))
    tenant.refresh_from_db()
    assert (tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims) == (
        charged[0] - 10_000,
        charged[1] - 40 * 2**30,
        charged[2],
    )
    assert lifecycle.recount_usage() == []  # the counters agree with the units
    assert post(auth_client, "demo", "start", "op-2").status_code == 202
    tenant.refresh_from_db()
    assert (tenant.used_cpu_millicores, tenant.used_memory_bytes) == charged[:2]
    assert lifecycle.recount_usage() == []


def test_a_start_that_no_longer_fits_the_quota_is_refused(auth_client, tenant):
    unit = provisioned(tenant, phase=UnitPhase.STOPPED)
    GPUUnit.objects.filter(pk=unit.pk).update(compute_charged=False)
    type(tenant).objects.filter(pk=tenant.pk).update(quota_cpu="4", used_cpu_millicores=0)
    response = post(auth_client, "demo", "start")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"]["limit"] == "requests.cpu"
    unit.refresh_from_db()
    assert unit.phase == "Stopped"
    assert not Operation.objects.filter(kind="start").exists()


def test_a_replay_is_the_same_operation_and_another_action_under_its_id_a_conflict(
    auth_client, tenant
):
    provisioned(tenant)
    first = post(auth_client, "demo", "restart", "r-1")
    again = post(auth_client, "demo", "restart", "r-1")
    assert (first.status_code, again.status_code) == (202, 200)
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["data"]["createdAt"] == first.json()["data"]["createdAt"]
    conflict = post(auth_client, "demo", "stop", "r-1")
    assert conflict.json()["error"]["code"] == "operation_conflict"
    busy = post(auth_client, "demo", "stop", "s-1")
    assert busy.status_code == 409
    assert busy.json()["error"]["details"] == {"operationID": "r-1", "kind": "restart"}


def test_an_auto_stop_never_stops_a_unit_twice(tenant):
    unit = provisioned(tenant)
    GPUUnit.objects.filter(pk=unit.pk).update(stop_after="1s", stops_at=timezone.now())
    assert actions.stop_expired_units() == 1
    assert actions.stop_expired_units() == 0
    stop = Operation.objects.get(kind=OperationKind.STOP)
    assert stop.operation_id == f"@autostop-{unit.uid}-1"
    unit.refresh_from_db()
    assert (unit.phase, unit.reason, unit.stops_at) == ("Stopping", "AutoStop", None)


def test_merge_patch_follows_rfc_7396():
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3], "n": None}
    assert actions.merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3]}
    assert actions.merge_patch(target, {"c": None}) == {"a": "b", "l": [1, 2]}
    assert actions.merge_patch({"a": [1]}, {"a": {"b": 1}}) == {"a": {"b": 1}}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}  # untouched


@pytest.mark.parametrize(
    ("text", "seconds", "canonical"),
    [("2s", 2, "2s"), ("90m", 5400, "1h30m"), ("8h", 28800, "8h"), ("1d2h", 93600, "1d2h")],
)
def test_durations_are_parsed_and_spelled_one_way(text, seconds, canonical):
    assert parse_duration(text) == (seconds, None)
    assert format_duration(seconds) == canonical


@pytest.mark.parametrize("text", ["", "0s", "soon", "1.5h", "-1h", "1m1h", "8 h", "367d", "1H"])
def test_what_is_not_a_duration_says_so(text):
    seconds, problem = parse_duration(text)
    assert seconds is None
    assert problem


class TestActionRoutes(EndpointTest):
    method = "post"

    @pytest.mark.parametrize(
        ("action", "phase"),
        [
            ("stop", UnitPhase.RUNNING),
            ("start", UnitPhase.STOPPED),
            ("restart", UnitPhase.RUNNING),
        ],
    )
    def test_statements_are_the_baseline(self, auth_client, tenant, action, phase):
        self.path = f"/api/v1/gpu-units/{{name}}/{action}"
        provisioned(tenant, phase=phase)
        auth_client.get("/api/v1/quota")  # the key's first use of the minute stamps it
        self.assert_statement_count(auth_client, name="demo", data={"operationID": "s"})
        assert Operation.objects.filter(kind=action).count() == 1


class TestUpdateRoute(EndpointTest):
    method = "patch"
    path = "/api/v1/gpu-units/{name}"

    def test_statements_are_the_baseline(self, auth_client, tenant):
        unit = provisioned(tenant)
        auth_client.get("/api/v1/quota")
        self.assert_statement_count(
            auth_client,
            name="demo",
            data={"operationID": "u", "image": "python:3.13"},
            headers={"If-Match": unit.etag},
        )
        unit.refresh_from_db()
        assert unit.generation == 2
        assert unit.image == "python:3.13"
