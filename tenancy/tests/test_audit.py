"""The audit log: append-only in the ORM and in the database, read through GET /audit-events
(a tenant's own) and GET /operator/audit-events (every tenant's), filtered and paged by cursor,
as JSON or CloudEvents, in a read-only admin; admin writes name their tenant and target, and
no request body reaches it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.urls import reverse

from controlplane import metrics
from tenancy.models import ApiKey, AppendOnly, AuditEvent, Tenant
from tenancy.services import create_api_key
from tenancy.tests.factories import TenantFactory
from tenancy.tests.test_sshkeys import ED25519
from tests.endpoints import EndpointTest

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def keyed(tenant: Tenant) -> tuple[Client, str]:
    """A client sending a new key of `tenant`, and the key's prefix."""
    from rest_framework.test import APIClient

    api_key, secret = create_api_key(tenant=tenant, name="audit")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client, api_key.prefix


def event(tenant: Tenant | None, **fields) -> AuditEvent:
    """An audit event as the middleware writes one (a unit ordered through the API)."""
    values = {
        "source": "api",
        "actor_kind": "api_key",
        "actor": "0123456789ab",
        "tenant": tenant,
        "tenant_slug": tenant.slug if tenant else "",
        "action": "units_create",
        "target_kind": "units",
        "target_name": "demo",
        "method": "POST",
        "path": "/api/v1/gpu-units",
        "status": 201,
        "outcome": "success",
        "request_id": "req-1",
        "remote_address": "192.0.2.7",
        "occurred_at": T0,
    }
    return AuditEvent.objects.create(**(values | fields))


class TestAppendOnly:
    def test_the_orm_never_changes_or_deletes_an_event(self, tenant):
        written = event(tenant)
        written.action = "units_delete"
        with pytest.raises(AppendOnly):
            written.save()
        with pytest.raises(AppendOnly):
            written.delete()
        with pytest.raises(AppendOnly):
            AuditEvent.objects.filter(pk=written.pk).update(action="units_delete")
        with pytest.raises(AppendOnly):
            AuditEvent.objects.filter(pk=written.pk).delete()
        assert AuditEvent.objects.get().action == "units_create"

    @pytest.mark.parametrize(
        "statement",
        [
            "UPDATE tenancy_auditevent SET outcome = 'success'",
            "DELETE FROM tenancy_auditevent",
        ],
    )
    def test_the_database_refuses_update_and_delete(self, tenant, statement):
        event(tenant, outcome="failure", status=409)
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement)
        assert AuditEvent.objects.get().outcome == "failure"

    def test_a_tenant_s_history_outlives_the_tenant(self):
        tenant = TenantFactory()
        client, _ = keyed(tenant)
        assert client.post("/api/v1/ssh-keys", {}, format="json").status_code == 400
        slug = tenant.slug
        tenant.delete()
        kept = AuditEvent.objects.get()
        assert (kept.tenant_slug, kept.action) == (slug, "ssh_keys_create")


class TestAuditEventList(EndpointTest):
    method = "get"
    path = "/api/v1/audit-events"

    def test_a_tenant_sees_its_own_writes_only(self):
        mine, other = TenantFactory(), TenantFactory()
        client, prefix = keyed(mine)
        other_client, _ = keyed(other)
        for sender, name in ((client, "laptop"), (other_client, "other")):
            body = {"name": name, "publicKey": ED25519}
            assert sender.post("/api/v1/ssh-keys", body, format="json").status_code == 201
        client.delete("/api/v1/ssh-keys/nope")

        data = self.get_success_response(client).json()["data"]
        assert [(e["action"], e["target"], e["status"], e["outcome"]) for e in data] == [
            ("ssh_keys_delete", {"kind": "ssh_keys", "name": "nope"}, 404, "failure"),
            ("ssh_keys_create", {"kind": "ssh_keys", "name": "laptop"}, 201, "success"),
        ]
        newest = data[0]
        assert newest["actor"] == {"kind": "api_key", "name": prefix}
        assert newest["tenant"] == mine.slug
        assert (newest["source"], newest["method"]) == ("api", "DELETE")
        assert newest["path"] == "/api/v1/ssh-keys/nope"
        assert newest["errorCode"] == "not_found"
        assert newest["requestId"]
        assert newest["remoteAddress"] == "127.0.0.1"
        assert set(newest) == {
            "id",
            "occurredAt",
            "source",
            "actor",
            "tenant",
            "action",
            "target",
            "method",
            "path",
            "status",
            "outcome",
            "errorCode",
            "requestId",
            "remoteAddress",
        }

    def test_pages_newest_first_by_cursor(self, tenant, auth_client):
        for index in range(5):
            event(tenant, target_name=f"unit-{index}")
        event(TenantFactory(), target_name="not-mine")
        seen, cursor = [], None
        while True:
            query = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            body = self.get_success_response(auth_client, query=query).json()
            seen += [e["target"]["name"] for e in body["data"]]
            cursor = body["meta"]["nextCursor"]
            if cursor is None:
                break
        assert seen == [f"unit-{index}" for index in reversed(range(5))]

    def test_a_cursor_is_good_for_its_own_list_only(self, tenant, auth_client):
        for _ in range(3):
            event(tenant)
        cursor = self.get_success_response(auth_client, query={"limit": 1}).json()["meta"][
            "nextCursor"
        ]
        other_client, _ = keyed(TenantFactory())
        error = self.get_error_response(
            other_client, query={"cursor": cursor}, status=400, code="invalid_request"
        )
        assert "cursor" in error["details"]["fields"]
        self.get_error_response(
            auth_client,
            query={"cursor": cursor, "outcome": "success"},
            status=400,
            code="invalid_request",
        )

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ({"action": "units_stop"}, ["stop"]),
            ({"target": "ssh_keys"}, ["key"]),
            ({"target": "units/b"}, ["stop"]),
            ({"actor": "alice"}, ["dashboard"]),
            ({"source": "dashboard"}, ["dashboard"]),
            ({"outcome": "failure"}, ["stop"]),
            ({"requestId": "req-key"}, ["key"]),
            ({"from": "2026-11-02T10:00:00Z"}, ["dashboard", "key"]),
            ({"from": "2026-11-02T10:00:00Z", "to": "2026-11-02T11:00:00Z"}, ["key"]),
            ({"to": "2026-11-02"}, []),
        ],
    )
    def test_filters(self, tenant, auth_client, query, expected):
        event(tenant, action="units_stop", target_name="b", outcome="failure", status=409)
        event(
            tenant,
            action="ssh_keys_create",
            target_kind="ssh_keys",
            target_name="laptop",
            request_id="req-key",
            occurred_at=T0 + timedelta(hours=1),
        )
        event(
            tenant,
            source="dashboard",
            actor_kind="user",
            actor="alice",
            target_name="c",
            occurred_at=T0 + timedelta(hours=2),
        )
        names = {"b": "stop", "laptop": "key", "c": "dashboard"}
        data = self.get_success_response(auth_client, query=query).json()["data"]
        assert [names[e["target"]["name"]] for e in data] == expected

    @pytest.mark.parametrize(
        "query",
        [
            {"from": "2026-11-02T10:00:00Z", "to": "2026-11-02T10:00:00Z"},
            {"from": "yesterday"},
            {"outcome": "maybe"},
            {"source": "cli"},
            {"format": "xml"},
            {"action": "units create"},
        ],
    )
    def test_a_bad_filter_is_400(self, auth_client, query):
        self.get_error_response(auth_client, query=query, status=400, code="invalid_request")

    def test_as_cloudevents_one_per_line_with_the_next_page_linked(self, tenant, auth_client):
        for index in range(3):
            event(tenant, target_name=f"unit-{index}", occurred_at=T0 + timedelta(minutes=index))
        response = self.call(auth_client, query={"format": "cloudevents", "limit": 2})
        assert response.status_code == 200
        assert response["Content-Type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in response.content.decode().splitlines()]
        assert [line["data"]["target"]["name"] for line in lines] == ["unit-2", "unit-1"]
        first = lines[0]
        assert {key: first[key] for key in ("specversion", "type", "source", "subject")} == {
            "specversion": "1.0",
            "type": "io.lokiwager.gpu.audit",
            "source": "//testserver/audit",
            "subject": tenant.slug,
        }
        assert first["id"] == first["data"]["id"]
        assert first["time"] == "2026-11-02T09:02:00Z" == first["data"]["occurredAt"]
        assert first["datacontenttype"] == "application/json"
        link = response["Link"]
        assert link.startswith("<http://testserver/api/v1/audit-events?")
        assert link.endswith('>; rel="next"')
        rest = auth_client.get(link[1 : link.index(">")])
        tail = [json.loads(line) for line in rest.content.decode().splitlines()]
        assert [line["data"]["target"]["name"] for line in tail] == ["unit-0"]
        assert "Link" not in rest

    def test_without_a_key_it_is_401(self, api_client):
        self.get_error_response(api_client, status=401, code="unauthenticated")

    def test_statements_are_the_baseline(self, tenant, auth_client):
        for _ in range(3):
            event(tenant)
        auth_client.get("/api/v1/quota")  # warm the key's last-used stamp
        cursor = self.get_success_response(auth_client, query={"limit": 1}).json()["meta"]
        self.assert_statement_count(auth_client, query={"limit": 1, "cursor": cursor["nextCursor"]})


class TestOperatorAuditEventList(EndpointTest):
    method = "get"
    path = "/api/v1/operator/audit-events"

    def test_an_operator_sees_every_tenant_and_the_writes_for_none(self):
        first, second = TenantFactory(), TenantFactory()
        event(first, target_name="a")
        event(second, target_name="b")
        event(None, source="admin", action="catalog.package.change", target_name="gpu-x")
        client, _ = keyed(TenantFactory(is_operator=True))
        data = self.get_success_response(client).json()["data"]
        assert [(e["tenant"], e["target"]["name"]) for e in data] == [
            (None, "gpu-x"),
            (second.slug, "b"),
            (first.slug, "a"),
        ]
        mine = self.get_success_response(client, query={"tenant": first.slug}).json()["data"]
        assert [e["target"]["name"] for e in mine] == ["a"]

    def test_a_customer_key_is_403(self, auth_client):
        self.get_error_response(auth_client, status=403, code="forbidden")

    def test_statements_are_the_baseline(self, tenant):
        for _ in range(3):
            event(tenant)
        client, _ = keyed(TenantFactory(is_operator=True))
        client.get("/api/v1/quota")  # warm the key's last-used stamp
        self.assert_statement_count(client, query={"tenant": tenant.slug, "limit": 2})


class TestAdmin:
    def test_the_log_is_read_only(self, admin_client, tenant):
        written = event(tenant)
        changelist = admin_client.get(reverse("admin:tenancy_auditevent_changelist"))
        assert changelist.status_code == 200
        assert "units_create" in changelist.content.decode()
        page = admin_client.get(reverse("admin:tenancy_auditevent_change", args=[written.pk]))
        assert page.status_code == 200
        assert 'name="_save"' not in page.content.decode()
        assert admin_client.get(reverse("admin:tenancy_auditevent_add")).status_code == 403
        delete = reverse("admin:tenancy_auditevent_delete", args=[written.pk])
        assert admin_client.post(delete, {"post": "yes"}).status_code == 403
        assert AuditEvent.objects.filter(pk=written.pk).exists()

    def test_a_change_names_the_tenant_and_the_object(self, admin_client, admin_user):
        tenant = TenantFactory()
        api_key, _ = create_api_key(tenant=tenant, name="ci")
        url = reverse("admin:tenancy_apikey_change", args=[api_key.pk])
        assert admin_client.post(url, {"name": "deploys"}).status_code == 302
        recorded = AuditEvent.objects.get()
        assert (recorded.source, recorded.actor, recorded.action) == (
            "admin",
            admin_user.username,
            "tenancy.apikey.change",
        )
        assert (recorded.tenant_id, recorded.tenant_slug) == (tenant.pk, tenant.slug)
        assert (recorded.target_kind, recorded.target_name) == ("tenancy.apikey", str(api_key.pk))
        assert recorded.outcome == "success"

    def test_a_refused_change_is_a_failure(self, admin_client):
        api_key, _ = create_api_key(tenant=TenantFactory(), name="ci")
        url = reverse("admin:tenancy_apikey_change", args=[api_key.pk])
        assert admin_client.post(url, {"name": "x" * 101}).status_code == 200  # the form again
        recorded = AuditEvent.objects.get()
        assert (recorded.action, recorded.status, recorded.outcome) == (
            "tenancy.apikey.change",
            200,
            "failure",
        )

    def test_a_key_added_names_its_tenant_and_succeeds_with_the_secret_page(self, admin_client):
        tenant = TenantFactory()
        response = admin_client.post(
            reverse("admin:tenancy_apikey_add"), {"tenant": tenant.pk, "name": "ci"}
        )
        assert response.status_code == 200
        secret = response.context["new_keys"][0][1]
        recorded = AuditEvent.objects.get()
        api_key = ApiKey.objects.get(tenant=tenant)
        assert (recorded.action, recorded.outcome) == ("tenancy.apikey.add", "success")
        assert (recorded.tenant_slug, recorded.target_name) == (tenant.slug, str(api_key.pk))
        assert secret not in json.dumps(AuditEvent.objects.values().get(), default=str)

    def test_a_bulk_action_names_it_the_selection_and_their_tenant(self, admin_client):
        tenant = TenantFactory()
        keys = [create_api_key(tenant=tenant, name=name)[0] for name in ("a", "b")]
        response = admin_client.post(
            reverse("admin:tenancy_apikey_changelist"),
            {"action": "revoke", "_selected_action": [str(key.pk) for key in keys]},
        )
        assert response.status_code == 302
        recorded = AuditEvent.objects.get()
        assert (recorded.action, recorded.outcome) == ("tenancy.apikey.revoke", "success")
        assert recorded.tenant_slug == tenant.slug
        assert recorded.target_name == ",".join(str(key.pk) for key in keys)

    def test_a_bulk_deletion_is_recorded_once_it_deletes(self, admin_client):
        tenant = TenantFactory()
        create_api_key(tenant=tenant, name="gone")
        url = reverse("admin:tenancy_apikey_changelist")
        selected = {"action": "delete_selected", "_selected_action": [str(ApiKey.objects.get().pk)]}
        assert admin_client.post(url, selected).status_code == 200  # "are you sure?"
        assert not AuditEvent.objects.exists()
        assert admin_client.post(url, {**selected, "post": "yes"}).status_code == 302
        recorded = AuditEvent.objects.get()
        assert (recorded.action, recorded.tenant_slug) == (
            "tenancy.apikey.delete_selected",
            tenant.slug,
        )
        assert not ApiKey.objects.exists()

    def test_a_deletion_names_the_tenant_it_was_of(self, admin_client):
        tenant = TenantFactory()
        url = reverse("admin:tenancy_tenant_delete", args=[tenant.pk])
        assert admin_client.post(url, {"post": "yes"}).status_code == 302
        assert not Tenant.objects.filter(pk=tenant.pk).exists()
        recorded = AuditEvent.objects.get()
        assert (recorded.action, recorded.outcome) == ("tenancy.tenant.delete", "success")
        assert (recorded.tenant_id, recorded.tenant_slug) == (tenant.pk, tenant.slug)


def test_no_body_reaches_the_log(settings, tenant, auth_client, admin_user):
    settings.DASHBOARD_RATE_PER_ADDRESS = "1000000/min"
    password = "correct-horse-battery-staple-41"
    admin_user.set_password(password)
    admin_user.save()
    Client().post(reverse("admin:login"), {"username": admin_user.username, "password": password})
    Client().post(
        reverse("dashboard:login"), {"username": admin_user.username, "password": password}
    )
    auth_client.post("/api/v1/ssh-keys", {"name": "laptop", "publicKey": ED25519}, format="json")
    auth_client.post(
        "/api/v1/gpu-units",
        {"operationID": "o", "name": "u", "image": "x", "TOKEN": "hf_s3cr3t_t0ken"},
        format="json",
    )
    recorded = list(AuditEvent.objects.values())
    assert {(row["source"], row["action"]) for row in recorded} == {
        ("admin", "login"),
        ("dashboard", "login"),
        ("api", "ssh_keys_create"),
        ("api", "units_create"),
    }
    text = json.dumps(recorded, default=str)
    for sent in (password, "hf_s3cr3t_t0ken", ED25519.split()[1], "TOKEN"):
        assert sent not in text


def test_a_tenant_reads_its_staff_s_actions_as_the_operator_s(tenant, admin_user):
    """Issue 41, item 4: a tenant's audit log showed the username and address of the staff
    who acted for it. Its own users' names stay; the operator log keeps who it was."""
    client, _prefix = keyed(tenant)
    event(tenant, source="admin", actor_kind="user", actor=admin_user.username, request_id="r1")
    event(tenant, source="dashboard", actor_kind="user", actor=admin_user.username, request_id="r2")
    event(tenant, source="dashboard", actor_kind="user", actor="alice", request_id="r3")
    rows = client.get("/api/v1/audit-events").json()["data"]
    seen = {row["requestId"]: (row["actor"], row["remoteAddress"]) for row in rows}
    operator = ({"kind": "operator", "name": "operator"}, None)
    assert seen["r1"] == operator
    assert seen["r2"] == operator
    assert seen["r3"] == ({"kind": "user", "name": "alice"}, "192.0.2.7")
    lines = (
        client.get("/api/v1/audit-events", {"format": "cloudevents"}).content.decode().splitlines()
    )
    actors = {
        json.loads(line)["data"]["requestId"]: json.loads(line)["data"]["actor"] for line in lines
    }
    assert actors["r1"] == actors["r2"] == {"kind": "operator", "name": "operator"}

    def actors_of(actor: str) -> list[str]:
        answer = client.get("/api/v1/audit-events", {"actor": actor})
        assert answer.status_code == 200, answer.content
        return sorted(row["requestId"] for row in answer.json()["data"])

    # The filter matches what the log shows: a staff username finds nothing (so it cannot be
    # probed for), "operator" finds the staff's rows, a tenant user's name their own.
    assert actors_of(admin_user.username) == []
    assert actors_of("operator") == ["r1", "r2"]
    assert actors_of("alice") == ["r3"]
    operator_client, _ = keyed(TenantFactory(is_operator=True))
    answer = operator_client.get(
        "/api/v1/operator/audit-events", {"actor": admin_user.username, "tenant": tenant.slug}
    )
    assert sorted(row["requestId"] for row in answer.json()["data"]) == ["r1", "r2"]


def test_a_write_refused_before_acting_is_counted_not_stored(tenant):
    """Issue 41, item 5: every throttled or forbidden write with a valid key took a row."""
    client, _prefix = keyed(tenant)
    counted = metrics.AUDIT_REFUSED.labels(source="api", status="403")
    before = counted._value.get()
    for _ in range(3):  # a tenant key on an operator's write
        answer = client.post("/api/v1/operator/usage/exports", {}, format="json")
        assert answer.status_code == 403
    assert not AuditEvent.objects.exists()
    assert counted._value.get() == before + 3
    # A write that was refused after looking (a 400) is still the log's.
    assert client.post("/api/v1/ssh-keys", {}, format="json").status_code == 400
    assert AuditEvent.objects.get().status == 400
