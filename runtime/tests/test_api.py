"""The GPU unit and operation endpoints, one test class each: success, each error code, the
statement-count baseline; then tenant isolation across them. Database only: no cluster and no
worker (commands are queued after commit, which these transaction-wrapped tests never reach).
The usage counters behind the quota are tested in test_usage_counters.py."""

from __future__ import annotations

import json

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from runtime import lifecycle, orders
from runtime.models import GPUUnit, Operation, UnitPhase
from tenancy.tests.factories import TenantFactory
from tests.endpoints import EndpointTest, client_for, recording

pytestmark = pytest.mark.django_db

URL = "/api/v1/gpu-units"


@pytest.fixture(autouse=True)
def package(db):
    return PackageFactory(article=True)


def body(**overrides) -> dict:
    return {
        "operationID": "unit-demo-001",
        "name": "demo-instance",
        "packageID": ARTICLE_PACKAGE_ID,
        "image": "python:3.12",
        **overrides,
    }


def error_code(response) -> str:
    return response.json()["error"]["code"]


def make_units(tenant, count: int) -> None:
    for index in range(count):
        orders.create_unit(
            tenant=tenant,
            operation_id=f"op-{index}",
            name=f"unit-{index}",
            package_id=ARTICLE_PACKAGE_ID,
            image="busybox",
        )


def roomy(tenant):
    """The tenant with a quota a test's many units never reach."""
    type(tenant).objects.filter(pk=tenant.pk).update(
        quota_cpu="2000", quota_memory="8Ti", quota_claims=1000
    )
    tenant.refresh_from_db()
    return tenant


class TestUnitCreate(EndpointTest):
    method = "post"
    path = "/api/v1/gpu-units"

    def test_creates_unit_with_package_contract_and_operation(self, auth_client, tenant):
        response = auth_client.post(URL, body(name="  Demo-Instance "), format="json")
        assert response.status_code == 201
        # Where the new unit is read (its name as stored: trimmed, lower-cased).
        assert response["Location"] == "/api/v1/gpu-units/demo-instance"
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
        assert data["uid"] == str(operation.unit.uid)  # the one ID that never names two units

    def test_replay_returns_same_unit_with_200(self, auth_client):
        first = auth_client.post(URL, body(), format="json")
        second = auth_client.post(URL, body(), format="json")
        assert second.status_code == 200
        assert second["Idempotent-Replayed"] == "true"
        assert second.json()["data"]["createdAt"] == first.json()["data"]["createdAt"]
        assert GPUUnit.objects.count() == 1
        # The body says so too, for a client that shows no headers (curl -s).
        assert first.json()["meta"] == {"operationID": "unit-demo-001", "replayed": False}
        assert second.json()["meta"] == {"operationID": "unit-demo-001", "replayed": True}

    def test_a_name_written_otherwise_than_sent_is_said(self, auth_client):
        response = auth_client.post(URL, body(name="Demo-Instance"), format="json")

        assert response.status_code == 201
        assert response.json()["data"]["name"] == "demo-instance"
        assert response.json()["meta"]["note"] == (
            'The name "Demo-Instance" is written "demo-instance": names are lower-case DNS labels.'
        )

    def test_replay_survives_catalog_changes(self, auth_client, package):
        auth_client.post(URL, body(), format="json")
        package.cpu = "12"
        package.save()
        assert auth_client.post(URL, body(), format="json").status_code == 200

    def test_same_operation_different_payload_is_operation_conflict(self, auth_client):
        self.get_success_response(auth_client, data=body(), status=201)
        self.get_error_response(
            auth_client, data=body(image="python:3.13"), status=409, code="operation_conflict"
        )

    def test_name_held_by_live_unit_is_name_conflict(self, auth_client):
        self.get_success_response(auth_client, data=body(), status=201)
        error = self.get_error_response(
            auth_client, data=body(operationID="other"), status=409, code="name_conflict"
        )
        assert error["details"] == {"name": "demo-instance"}
        assert Operation.objects.count() == 1

    def test_name_reusable_after_termination(self, auth_client):
        auth_client.post(URL, body(), format="json")
        GPUUnit.objects.update(phase=UnitPhase.TERMINATED)
        assert auth_client.post(URL, body(operationID="again"), format="json").status_code == 201

    def test_a_misspelt_field_is_told_the_field_it_may_mean(self, auth_client):
        request = body()
        request["packageId"] = request.pop("packageID")

        error = self.get_error_response(
            auth_client, data=request, status=400, code="invalid_request"
        )

        assert error["details"]["fields"]["packageId"] == ["Unknown field; did you mean packageID?"]
        assert not GPUUnit.objects.exists()

    def test_a_package_not_on_sale_points_to_the_packages_and_the_one_meant(self, auth_client):
        error = self.get_error_response(
            auth_client,
            data=body(packageID="gpu-rtx3080-2x-cpu10-mem4g"),
            status=400,
            code="invalid_request",
        )

        assert error["details"]["fields"]["packageID"] == [
            "No package gpu-rtx3080-2x-cpu10-mem4g is on sale: GET /packages lists those that "
            f"are. Did you mean {ARTICLE_PACKAGE_ID}?"
        ]

    def test_quota_exceeded_names_the_limit_and_creates_nothing(self, tenant):
        tenant.quota_cpu = "15"
        tenant.save()
        client = client_for(tenant)
        self.get_success_response(client, data=body(), status=201)
        error = self.get_error_response(
            client,
            data=body(operationID="b", name="b"),
            status=409,
            code="quota_exceeded",
        )
        # The sentence the dashboard shows, with the next step; the details name the limit.
        assert error["message"] == (
            "Not enough quota left for this package: it needs 10 CPU, and 10 of 15 are in use. "
            "Delete a unit or pick a smaller package."
        )
        assert error["details"] == {
            "limit": "requests.cpu",
            "used": "10",
            "requested": "10",
            "hard": "15",
            "largerThanQuota": False,
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

    def test_an_order_costs_the_baseline_statements_however_many_units_the_tenant_has(self, tenant):
        client = client_for(roomy(tenant))
        client.get(URL)  # stamp the key's last use, which a first request also writes
        first = self.assert_statement_count(client, data=body(operationID="first", name="first"))
        make_units(tenant, 40)
        later = self.assert_statement_count(client, data=body(operationID="later", name="later"))
        # key + tenant, lookup, the clusters (placement), tenant lock, the order, the audit event
        assert len(later) == len(first)
        # The quota check reads the tenant's counters; nothing sums the tenant's units.
        assert not [sql for sql in later if "sum(" in sql.lower() or "count(" in sql.lower()]

    def test_a_replay_costs_fewer_statements_than_an_order(self, auth_client):
        self.get_success_response(auth_client, data=body(), status=201)
        with recording() as log:
            self.get_success_response(auth_client, data=body(), status=200)
        # key + tenant, lookup, the unit, its cost to date (ledger rows, running meter), the
        # audit event
        assert len(log.statements) == 6

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
            ({"template": {"env": [{"name": "GPU_COUNT", "value": "8"}]}}, "template.env[0].name"),
            ({"deviceClassName": "nvidia-h100"}, "deviceClassName"),
            ({"claimName": "mine"}, "claimName"),
            ({"selectors": ["true"]}, "selectors"),
            # A JSON number or boolean is never read as a string.
            ({"name": 1e300}, "name"),
            ({"operationID": 12345566}, "operationID"),
            ({"packageID": True}, "packageID"),
            ({"image": 3.12}, "image"),
            # Only ASCII is case-folded: KELVIN SIGN would become "k".
            ({"name": "\u212a"}, "name"),
            ({"image": "python@sha256:" + "A" * 64}, "image"),
        ],
    )
    def test_bad_input_is_400_per_field_and_creates_nothing(self, auth_client, overrides, field):
        error = self.get_error_response(
            auth_client, data=body(**overrides), status=400, code="invalid_request"
        )
        assert field in error["details"]["fields"]
        assert not GPUUnit.objects.exists()
        assert not Operation.objects.exists()

    def test_a_package_id_needing_a_unicode_fold_is_not_found(self, auth_client):
        PackageFactory(id="kepler-1x")
        sneaky = "\u212aepler-1x"  # KELVIN SIGN, which str.lower() makes "k"
        response = auth_client.post(URL, body(packageID=sneaky), format="json")
        assert response.status_code == 400
        assert "packageID" in response.json()["error"]["details"]["fields"]

    def test_template_errors_are_a_list_of_strings_per_field_path(self, auth_client):
        template = {"command": "python", "env": [{"name": "1 bad"}], "extra": 1}
        error = self.get_error_response(
            auth_client, data=body(template=template), status=400, code="invalid_request"
        )
        fields = error["details"]["fields"]
        assert set(fields) == {"template.command", "template.env[0].name", "template.extra"}
        assert all(
            isinstance(messages, list) and all(isinstance(m, str) for m in messages)
            for messages in fields.values()
        )
        assert not GPUUnit.objects.exists()

    def test_duplicate_keys_are_400_and_create_nothing(self, auth_client):
        raw = json.dumps(body())[:-1] + ', "name": "other"}'
        response = auth_client.post(URL, raw, content_type="application/json")
        assert response.status_code == 400
        assert "appears twice" in response.json()["error"]["message"]
        assert not GPUUnit.objects.exists()

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


class TestUnitList(EndpointTest):
    path = "/api/v1/gpu-units"

    def test_list_paginates_newest_first_with_cursor(self, auth_client, tenant):
        make_units(tenant, 5)
        first = self.get_success_response(auth_client, query={"limit": 2}).json()
        assert [u["name"] for u in first["data"]] == ["unit-4", "unit-3"]
        cursor = first["meta"]["nextCursor"]
        second = self.get_success_response(auth_client, query={"limit": 2, "cursor": cursor})
        second = second.json()
        assert [u["name"] for u in second["data"]] == ["unit-2", "unit-1"]
        cursor = second["meta"]["nextCursor"]
        third = self.get_success_response(auth_client, query={"limit": 2, "cursor": cursor})
        third = third.json()
        assert [u["name"] for u in third["data"]] == ["unit-0"]
        assert third["meta"]["nextCursor"] is None

    def test_terminated_units_are_left_out_unless_asked_for(self, auth_client, tenant):
        make_units(tenant, 3)
        gone = GPUUnit.objects.get(name="unit-1")
        GPUUnit.objects.filter(pk=gone.pk).update(phase=UnitPhase.TERMINATED)
        names = [u["name"] for u in self.get_success_response(auth_client).json()["data"]]
        assert names == ["unit-2", "unit-0"]
        every = self.get_success_response(auth_client, query={"include": "terminated"})
        assert [u["name"] for u in every.json()["data"]] == ["unit-2", "unit-1", "unit-0"]
        asked = self.get_success_response(auth_client, query={"phase": "Terminated"})
        assert [u["name"] for u in asked.json()["data"]] == ["unit-1"]
        error = self.get_error_response(
            auth_client, status=400, code="invalid_request", query={"include": "all"}
        )
        assert "include" in error["details"]["fields"]
        # A cursor of the full list is not one of the default list.
        cursor = self.get_success_response(
            auth_client, query={"include": "terminated", "limit": 1}
        ).json()["meta"]["nextCursor"]
        self.get_error_response(
            auth_client, status=400, code="invalid_request", query={"cursor": cursor}
        )

    def test_cursors_are_opaque_and_bound_to_the_tenant_and_filters(self, auth_client, tenant):
        make_units(tenant, 3)
        other = TenantFactory()
        make_units(other, 3)
        cursor = self.get_success_response(auth_client, query={"limit": 1}).json()["meta"][
            "nextCursor"
        ]
        # It says nothing about other tenants: their orders in between leave it as it was.
        make_units(TenantFactory(), 3)
        again = self.get_success_response(auth_client, query={"limit": 1}).json()["meta"]
        assert again["nextCursor"] == cursor
        assert cursor != str(GPUUnit.objects.get(tenant=tenant, name="unit-2").id)
        for client, query in [
            (client_for(other), {"cursor": cursor}),  # another tenant's
            (auth_client, {"cursor": cursor, "phase": "Running"}),  # another filter's
            (auth_client, {"cursor": cursor[:-1] + ("A" if cursor[-1] != "A" else "B")}),
            (auth_client, {"cursor": "450"}),  # the old kind: a row id
        ]:
            response = client.get(self.path, query)
            assert response.status_code == 400, query
            assert "cursor" in response.json()["error"]["details"]["fields"]
        same = self.get_success_response(auth_client, query={"limit": 1, "cursor": cursor})
        assert [u["name"] for u in same.json()["data"]] == ["unit-1"]

    def test_list_filters_by_phase_and_package(self, auth_client, tenant):
        PackageFactory(id="gpu-h100-1x", spec_name="h", gpu=1, count=1)
        make_units(tenant, 2)
        orders.create_unit(
            tenant=tenant, operation_id="h", name="h", package_id="gpu-h100-1x", image="busybox"
        )
        GPUUnit.objects.filter(name="unit-0").update(phase=UnitPhase.RUNNING)
        running = self.get_success_response(auth_client, query={"phase": "Running"})
        assert [u["name"] for u in running.json()["data"]] == ["unit-0"]
        h100 = self.get_success_response(auth_client, query={"packageID": "GPU-H100-1X"})
        assert [u["name"] for u in h100.json()["data"]] == ["h"]

    @pytest.mark.parametrize(
        "query", [{"phase": "Sleeping"}, {"limit": "0"}, {"limit": "101"}, {"cursor": "!!!"}]
    )
    def test_list_rejects_bad_query(self, auth_client, query):
        self.get_error_response(auth_client, query=query, status=400, code="invalid_request")

    def test_list_needs_a_key(self, api_client):
        self.get_error_response(api_client, status=401, code="unauthenticated")

    @pytest.mark.parametrize("limit", [10, 100])
    def test_statements_are_the_baseline_whatever_the_page_size(self, tenant, limit):
        make_units(roomy(tenant), 100)
        client = client_for(tenant)
        client.get(URL)  # warm the key's last-used stamp
        self.assert_statement_count(client, query={"limit": limit})
        assert len(client.get(URL, {"limit": limit}).json()["data"]) == limit


class TestUnitDetail(EndpointTest):
    path = "/api/v1/gpu-units/{name}"

    def test_one_unit_by_name_case_insensitively(self, auth_client, tenant):
        make_units(tenant, 1)
        data = self.get_success_response(auth_client, name="UNIT-0").json()["data"]
        assert (data["name"], data["phase"]) == ("unit-0", "Accepted")

    @pytest.mark.parametrize("name", ["nope", "not_a_label", "x" * 60])
    def test_unknown_or_impossible_name_is_404(self, auth_client, name):
        self.get_error_response(auth_client, name=name, status=404, code="not_found")

    def test_statements_are_the_baseline(self, auth_client, tenant):
        make_units(tenant, 1)
        auth_client.get(URL)  # warm the key's last-used stamp
        self.assert_statement_count(auth_client, name="unit-0")


class TestUnitEvents(EndpointTest):
    path = "/api/v1/gpu-units/{name}/events"

    def test_events_are_the_timeline(self, auth_client, tenant):
        make_units(tenant, 1)
        events = self.get_success_response(auth_client, name="unit-0").json()["data"]
        assert [(e["type"], e["reason"], e["count"]) for e in events] == [("Normal", "Accepted", 1)]

    def test_unknown_unit_is_404(self, auth_client):
        self.get_error_response(auth_client, name="nope", status=404, code="not_found")

    def test_statements_are_the_baseline(self, auth_client, tenant):
        make_units(tenant, 1)
        auth_client.get(URL)  # warm the key's last-used stamp
        self.assert_statement_count(auth_client, name="unit-0")

    def test_the_timeline_pages_oldest_first_with_a_cursor(self, auth_client, tenant):
        make_units(tenant, 1)
        unit = GPUUnit.objects.get(name="unit-0")
        for number in range(4):
            lifecycle.append_event(unit, reason=f"Step{number}")
        first = self.get_success_response(auth_client, name="unit-0", query={"limit": 3}).json()
        assert [e["reason"] for e in first["data"]] == ["Accepted", "Step0", "Step1"]
        cursor = first["meta"]["nextCursor"]
        second = self.get_success_response(
            auth_client, name="unit-0", query={"limit": 3, "cursor": cursor}
        ).json()
        assert [e["reason"] for e in second["data"]] == ["Step2", "Step3"]
        assert second["meta"]["nextCursor"] is None
        # Bound to its unit: another unit's timeline refuses it.
        orders.create_unit(
            tenant=tenant,
            operation_id="op-1",
            name="unit-1",
            package_id=ARTICLE_PACKAGE_ID,
            image="busybox",
        )
        self.get_error_response(
            auth_client, name="unit-1", query={"cursor": cursor}, status=400, code="invalid_request"
        )


class TestOperationDetail(EndpointTest):
    path = "/api/v1/operations/{operation_id}"

    def test_operation_status(self, auth_client, tenant):
        make_units(tenant, 1)
        data = self.get_success_response(auth_client, operation_id="op-0").json()["data"]
        assert data == {
            **data,
            "operationID": "op-0",
            "kind": "create",
            "status": "pending",
            "unitName": "unit-0",
            "error": None,
        }

    @pytest.mark.parametrize("operation_id", ["missing", "has space"])
    def test_unknown_operation_is_404(self, auth_client, operation_id):
        self.get_error_response(
            auth_client, operation_id=operation_id, status=404, code="not_found"
        )

    def test_statements_are_the_baseline(self, auth_client, tenant):
        make_units(tenant, 1)
        auth_client.get(URL)  # warm the key's last-used stamp
        self.assert_statement_count(auth_client, operation_id="op-0")


class TestUnitDelete(EndpointTest):
    method = "delete"
    path = "/api/v1/gpu-units/{name}"

    def test_delete_is_202_terminating_repeatable_and_names_its_operation(self, auth_client):
        created = auth_client.post(URL, body(), format="json").json()["data"]
        first = self.get_success_response(auth_client, name="demo-instance", status=202).json()
        assert first["data"]["phase"] == "Terminating"
        assert first["data"]["uid"] == created["uid"]
        again = self.get_success_response(auth_client, name="demo-instance", status=202).json()
        assert Operation.objects.filter(kind="delete").count() == 1
        operation = Operation.objects.get(kind="delete")
        # The response names the deletion (the unit's operationID stays its order's), and
        # the same ID every time it is repeated.
        assert first["meta"]["operationID"] == again["meta"]["operationID"]
        assert first["meta"]["operationID"] == operation.operation_id == f"@delete-{created['uid']}"
        assert first["data"]["operationID"] == "unit-demo-001"
        status = auth_client.get(f"/api/v1/operations/{first['meta']['operationID']}")
        status = status.json()["data"]
        assert (status["kind"], status["unitName"]) == ("delete", "demo-instance")

    def test_delete_unknown_is_404(self, auth_client):
        self.get_error_response(auth_client, name="nope", status=404, code="not_found")

    def test_statements_are_the_baseline(self, auth_client):
        auth_client.post(URL, body(), format="json")
        self.assert_statement_count(auth_client, name="demo-instance")


class TestTenantIsolation:
    """Another tenant's unit does not exist for you: 404, never 403."""

    @pytest.fixture
    def foreign(self):
        owner = TenantFactory()
        orders.create_unit(
            tenant=owner,
            operation_id="theirs",
            name="theirs",
            package_id=ARTICLE_PACKAGE_ID,
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
