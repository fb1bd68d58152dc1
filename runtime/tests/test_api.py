"""Every GPU unit endpoint: success, each error code, tenant isolation, query counts.
Database only: no cluster and no worker (commands are queued after commit, which these
transaction-wrapped tests never reach)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from catalog.tests.factories import PackageFactory
from runtime import lifecycle, orders
from runtime.models import GPUUnit, Operation, UnitPhase
from tenancy.tests.factories import TenantFactory, key_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/gpu-units"


@pytest.fixture(autouse=True)
def package(db):
    return PackageFactory(article=True)


def body(**overrides) -> dict:
    return {
        "operationID": "unit-demo-001",
        "name": "demo-instance",
        "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
        "image": "python:3.12",
        **overrides,
    }


def client_for(tenant) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(tenant)}")
    return client


def error_code(response) -> str:
    return response.json()["error"]["code"]


class TestCreate:
    def test_creates_unit_with_package_contract_and_operation(self, auth_client, tenant):
        response = auth_client.post(URL, body(name="  Demo-Instance "), format="json")
        assert response.status_code == 201
        data = response.json()["data"]
        assert data["name"] == "demo-instance"
        assert data["namespace"] == tenant.namespace
        assert data["phase"] == "Accepted"
        assert data["allocation"] == {
            "deviceClassName": "nvidia-rtx-3080",
            "claimName": "unit-demo-instance-gpu",
            "claimRequestName": "gpu",
            "count": 2,
        }
        assert (data["cpu"], data["memory"], data["gpu"]) == ("10", "40Gi", 2)
        assert data["draStatus"] == {
            "claimName": "unit-demo-instance-gpu",
            "allocated": False,
            "devices": [],
        }
        operation = Operation.objects.get()
        assert (operation.kind, operation.status, operation.unit.name) == (
            "create",
            "pending",
            "demo-instance",
        )

    def test_replay_returns_same_unit_with_200(self, auth_client):
        first = auth_client.post(URL, body(), format="json")
        second = auth_client.post(URL, body(), format="json")
        assert second.status_code == 200
        assert second["Idempotent-Replayed"] == "true"
        assert second.json()["data"]["createdAt"] == first.json()["data"]["createdAt"]
        assert GPUUnit.objects.count() == 1

    def test_replay_survives_catalog_changes(self, auth_client, package):
        auth_client.post(URL, body(), format="json")
        package.cpu = "12"
        package.save()
        assert auth_client.post(URL, body(), format="json").status_code == 200

    def test_same_operation_different_payload_is_operation_conflict(self, auth_client):
        auth_client.post(URL, body(), format="json")
        response = auth_client.post(URL, body(image="python:3.13"), format="json")
        assert response.status_code == 409
        assert error_code(response) == "operation_conflict"

    def test_name_held_by_live_unit_is_name_conflict(self, auth_client):
        auth_client.post(URL, body(), format="json")
        response = auth_client.post(URL, body(operationID="other"), format="json")
        assert response.status_code == 409
        assert error_code(response) == "name_conflict"
        assert Operation.objects.count() == 1

    def test_name_reusable_after_termination(self, auth_client):
        auth_client.post(URL, body(), format="json")
        GPUUnit.objects.update(phase=UnitPhase.TERMINATED)
        assert auth_client.post(URL, body(operationID="again"), format="json").status_code == 201

    def test_quota_exceeded_names_the_limit_and_creates_nothing(self, tenant):
        tenant.quota_cpu = "15"
        tenant.save()
        client = client_for(tenant)
        assert client.post(URL, body(), format="json").status_code == 201
        response = client.post(URL, body(operationID="b", name="b"), format="json")
        assert response.status_code == 409
        error = response.json()["error"]
        assert error["code"] == "insufficient_capacity"
        assert "requests.cpu" in error["message"]
        assert error["details"] == {
            "limit": "requests.cpu",
            "used": "10",
            "requested": "10",
            "hard": "15",
        }
        assert GPUUnit.objects.count() == 1
        assert Operation.objects.count() == 1

    def test_claim_count_quota(self, tenant):
        tenant.quota_claims = 1
        tenant.save()
        client = client_for(tenant)
        client.post(URL, body(), format="json")
        response = client.post(URL, body(operationID="b", name="b"), format="json")
        assert response.json()["error"]["details"]["limit"] == (
            "count/resourceclaims.resource.k8s.io"
        )

    def test_terminated_units_free_quota(self, tenant):
        tenant.quota_cpu = "10"
        tenant.save()
        client = client_for(tenant)
        client.post(URL, body(), format="json")
        assert client.post(URL, body(operationID="b", name="b"), format="json").status_code == 409
        unit = lifecycle.request_unit_deletion(tenant=tenant, name="demo-instance")
        assert lifecycle.mark_unit_terminated(unit)
        assert client.post(URL, body(operationID="b", name="b"), format="json").status_code == 201

    def test_an_order_costs_the_same_statements_however_many_units_the_tenant_has(self, tenant):
        type(tenant).objects.filter(pk=tenant.pk).update(
            quota_cpu="2000", quota_memory="8Ti", quota_claims=1000
        )
        tenant.refresh_from_db()
        client = client_for(tenant)
        client.get(URL)  # stamp the key's last use, which a first request also writes

        def order(name: str) -> list[str]:
            with CaptureQueriesContext(connection) as queries:
                response = client.post(URL, body(operationID=name, name=name), format="json")
            assert response.status_code == 201, response.content
            return [query["sql"] for query in queries.captured_queries]

        first = order("first")
        for index in range(40):
            orders.create_unit(
                tenant=tenant,
                operation_id=f"op-{index}",
                name=f"unit-{index}",
                package_id="gpu-rtx3080-2x-cpu10-mem40g",
                image="busybox",
            )
        later = order("later")
        assert len(later) == len(first)
        # The quota check reads the tenant's counters; nothing sums the tenant's units.
        assert not [sql for sql in later if "sum(" in sql.lower() or "count(" in sql.lower()]
        statements = [sql for sql in later if "SAVEPOINT" not in sql.upper()]
        assert len(statements) == 4  # key + tenant, lookup, tenant lock, the order

    def test_orders_charge_and_termination_releases_the_tenant_usage(self, tenant):
        client = client_for(tenant)
        client.post(URL, body(), format="json")
        client.post(URL, body(operationID="b", name="b"), format="json")
        client.post(URL, body(), format="json")  # a replay charges nothing
        tenant.refresh_from_db()
        # The package: 10 CPUs, 40Gi.
        assert (tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims) == (
            20_000,
            80 * 2**30,
            2,
        )
        unit = lifecycle.request_unit_deletion(tenant=tenant, name="b")
        assert lifecycle.mark_unit_terminated(unit)
        assert not lifecycle.mark_unit_terminated(unit)
        tenant.refresh_from_db()
        assert (tenant.used_cpu_millicores, tenant.used_claims) == (10_000, 1)
        assert lifecycle.recount_usage() == []

    def test_deletion_by_uid_never_touches_a_newer_unit_of_the_same_name(self, tenant):
        client = client_for(tenant)
        client.post(URL, body(), format="json")
        old = lifecycle.request_unit_deletion(tenant=tenant, name="demo-instance")
        lifecycle.mark_unit_terminated(old)
        client.post(URL, body(operationID="again"), format="json")
        again = lifecycle.request_unit_deletion(tenant=tenant, name="demo-instance", uid=old.uid)
        assert (again.pk, again.phase) == (old.pk, UnitPhase.TERMINATED)
        newer = GPUUnit.objects.get(tenant=tenant, operation_id="again")
        assert newer.phase == UnitPhase.ACCEPTED

    def test_recount_repairs_counters_that_disagree_with_the_units(self, tenant):
        client_for(tenant).post(URL, body(), format="json")
        other = TenantFactory()
        GPUUnit.objects.update(phase=UnitPhase.TERMINATED)  # behind the order path's back
        assert lifecycle.recount_usage() == [tenant.slug]
        tenant.refresh_from_db()
        assert (tenant.used_cpu_millicores, tenant.used_memory_bytes, tenant.used_claims) == (
            0,
            0,
            0,
        )
        other.refresh_from_db()
        assert other.used_claims == 0
        assert lifecycle.recount_usage() == []

    @pytest.mark.parametrize(
        ("overrides", "field"),
        [
            ({"operationID": ""}, "operationID"),
            ({"operationID": "has space"}, "operationID"),
            ({"operationID": "x" * 129}, "operationID"),
            ({"operationID": "@delete-1"}, "operationID"),
            ({"name": "x" * 55}, "name"),
            ({"name": "dotted.name"}, "name"),
            ({"name": "under_score"}, "name"),
            ({"image": "Not An Image"}, "image"),
            ({"image": ""}, "image"),
            ({"template": {"env": [{"name": "GPU_COUNT", "value": "8"}]}}, "template"),
            ({"deviceClassName": "nvidia-h100"}, "deviceClassName"),
            ({"claimName": "mine"}, "claimName"),
            ({"selectors": ["true"]}, "selectors"),
        ],
    )
    def test_bad_input_is_400_per_field_and_creates_nothing(self, auth_client, overrides, field):
        response = auth_client.post(URL, body(**overrides), format="json")
        assert response.status_code == 400
        assert error_code(response) == "invalid_request"
        assert field in response.json()["error"]["details"]["fields"]
        assert not GPUUnit.objects.exists()
        assert not Operation.objects.exists()

    def test_longest_name_accepted(self, auth_client):
        response = auth_client.post(URL, body(name="n" * 54), format="json")
        assert response.status_code == 201
        assert response.json()["data"]["allocation"]["claimName"] == f"unit-{'n' * 54}-gpu"

    def test_missing_fields_listed(self, auth_client):
        response = auth_client.post(URL, {}, format="json")
        assert set(response.json()["error"]["details"]["fields"]) == {
            "operationID",
            "name",
            "packageID",
            "image",
        }

    def test_unknown_or_inactive_package_is_400(self, auth_client, package):
        response = auth_client.post(URL, body(packageID="gpu-nope"), format="json")
        assert response.status_code == 400
        assert "packageID" in response.json()["error"]["details"]["fields"]
        package.active = False
        package.save()
        assert auth_client.post(URL, body(), format="json").status_code == 400

    def test_operation_ids_are_per_tenant(self, auth_client):
        auth_client.post(URL, body(), format="json")
        other = client_for(TenantFactory())
        response = other.post(URL, body(), format="json")
        assert response.status_code == 201
        assert GPUUnit.objects.count() == 2


class TestListAndGet:
    def make_units(self, tenant, count: int, **overrides) -> None:
        for index in range(count):
            orders.create_unit(
                tenant=tenant,
                operation_id=f"op-{index}",
                name=f"unit-{index}",
                package_id="gpu-rtx3080-2x-cpu10-mem40g",
                image="busybox",
                **overrides,
            )

    def test_list_paginates_newest_first_with_cursor(self, auth_client, tenant):
        self.make_units(tenant, 5)
        first = auth_client.get(URL, {"limit": 2}).json()
        assert [u["name"] for u in first["data"]] == ["unit-4", "unit-3"]
        second = auth_client.get(URL, {"limit": 2, "cursor": first["meta"]["nextCursor"]}).json()
        assert [u["name"] for u in second["data"]] == ["unit-2", "unit-1"]
        third = auth_client.get(URL, {"limit": 2, "cursor": second["meta"]["nextCursor"]}).json()
        assert [u["name"] for u in third["data"]] == ["unit-0"]
        assert third["meta"]["nextCursor"] is None

    def test_list_filters_by_phase_and_package(self, auth_client, tenant):
        PackageFactory(id="gpu-h100-1x", spec_name="h", gpu=1, count=1)
        self.make_units(tenant, 2)
        orders.create_unit(
            tenant=tenant, operation_id="h", name="h", package_id="gpu-h100-1x", image="busybox"
        )
        GPUUnit.objects.filter(name="unit-0").update(phase=UnitPhase.RUNNING)
        running = auth_client.get(URL, {"phase": "Running"}).json()["data"]
        assert [u["name"] for u in running] == ["unit-0"]
        h100 = auth_client.get(URL, {"packageID": "GPU-H100-1X"}).json()["data"]
        assert [u["name"] for u in h100] == ["h"]

    @pytest.mark.parametrize(
        "query", [{"phase": "Sleeping"}, {"limit": "0"}, {"limit": "101"}, {"cursor": "!!!"}]
    )
    def test_list_rejects_bad_query(self, auth_client, query):
        response = auth_client.get(URL, query)
        assert response.status_code == 400
        assert error_code(response) == "invalid_request"

    @pytest.mark.parametrize("limit", [10, 100])
    def test_list_query_count_is_flat_in_page_size(self, auth_client, tenant, limit):
        type(tenant).objects.filter(pk=tenant.pk).update(
            quota_cpu="2000", quota_memory="8Ti", quota_claims=1000
        )
        tenant.refresh_from_db()
        self.make_units(tenant, 100)
        auth_client.get(URL)  # warm the key's last-used stamp
        with CaptureQueriesContext(connection) as queries:
            response = auth_client.get(URL, {"limit": limit})
        assert len(response.json()["data"]) == limit
        assert len(queries) == 2  # the key with its tenant, and one page of units

    def test_get_one_and_404_for_unknown(self, auth_client, tenant):
        self.make_units(tenant, 1)
        assert auth_client.get(f"{URL}/unit-0").json()["data"]["name"] == "unit-0"
        response = auth_client.get(f"{URL}/nope")
        assert response.status_code == 404
        assert error_code(response) == "not_found"

    def test_events_are_the_timeline(self, auth_client, tenant):
        self.make_units(tenant, 1)
        events = auth_client.get(f"{URL}/unit-0/events").json()["data"]
        assert [(e["type"], e["reason"], e["count"]) for e in events] == [("Normal", "Accepted", 1)]

    def test_operation_status(self, auth_client, tenant):
        self.make_units(tenant, 1)
        data = auth_client.get("/api/v1/operations/op-0").json()["data"]
        assert data == {
            **data,
            "operationID": "op-0",
            "kind": "create",
            "status": "pending",
            "unitName": "unit-0",
            "error": None,
        }
        assert auth_client.get("/api/v1/operations/missing").status_code == 404


class TestDelete:
    def test_delete_is_202_terminating_and_repeatable(self, auth_client):
        auth_client.post(URL, body(), format="json")
        first = auth_client.delete(f"{URL}/demo-instance")
        assert first.status_code == 202
        assert first.json()["data"]["phase"] == "Terminating"
        again = auth_client.delete(f"{URL}/demo-instance")
        assert again.status_code == 202
        assert Operation.objects.filter(kind="delete").count() == 1
        operation = Operation.objects.get(kind="delete")
        status = auth_client.get(f"/api/v1/operations/{operation.operation_id}").json()["data"]
        assert (status["kind"], status["unitName"]) == ("delete", "demo-instance")

    def test_delete_unknown_is_404(self, auth_client):
        assert error_code(auth_client.delete(f"{URL}/nope")) == "not_found"


class TestTenantIsolation:
    """Another tenant's unit does not exist for you: 404, never 403."""

    @pytest.fixture
    def foreign(self):
        owner = TenantFactory()
        orders.create_unit(
            tenant=owner,
            operation_id="theirs",
            name="theirs",
            package_id="gpu-rtx3080-2x-cpu10-mem40g",
            image="busybox",
        )
        return owner

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("get", f"{URL}/theirs"),
            ("get", f"{URL}/theirs/events"),
            ("delete", f"{URL}/theirs"),
            ("get", "/api/v1/operations/theirs"),
        ],
    )
    def test_foreign_unit_is_404(self, auth_client, foreign, method, path):
        response = getattr(auth_client, method)(path)
        assert response.status_code == 404
        assert GPUUnit.objects.get().phase == "Accepted"

    def test_list_shows_only_own_units(self, auth_client, foreign):
        assert auth_client.get(URL).json()["data"] == []
