"""Tenant secrets through the API and the simulated cluster: a Kubernetes Secret per secret in
the tenant's namespace, labelled as ours; created, replaced by sending it again, listed by keys
(never values) a page at a time, deleted; bad names, keys and sizes refused, the per-tenant
limit enforced, a foreign Secret of the same name never written over."""

from __future__ import annotations

import base64

import pytest
from django.test import override_settings

from controlplane import kube
from controlplane.kube.errors import PermanentError
from runtime import manifests
from runtime.control.provisioning import ensure_tenant_namespace
from runtime.models import TenantSecret
from runtime.tests.helpers import wait_until
from tenancy.tests.factories import TenantFactory
from tests.endpoints import EndpointTest, client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(cluster):
    """A tenant of its own with its namespace, both removed afterwards."""
    tenant = TenantFactory()
    kube.create(
        kube.NAMESPACE, None, manifests.build_namespace(tenant.namespace, tenant=tenant.slug)
    )
    yield tenant
    for secret in kube.list_objects(kube.SECRET, namespace=tenant.namespace):
        kube.delete(kube.SECRET, tenant.namespace, secret["metadata"]["name"])
    kube.delete(kube.NAMESPACE, None, tenant.namespace)


def _stored(tenant, name: str) -> dict | None:
    return kube.get(kube.SECRET, tenant.namespace, manifests.secret_object_name(name))


def _decoded(secret: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


class TestCreateSecret(EndpointTest):
    method = "post"
    path = "/api/v1/secrets"

    def test_creates_a_labelled_secret_when_new_and_shows_keys_not_values(self, owner):
        client = client_for(owner)
        body = {"name": "HF", "data": {"token": "hf_abc", "user": " me "}}
        data = self.get_success_response(client, status=201, data=body).json()["data"]
        assert data["name"] == "hf"
        assert data["keys"] == ["token", "user"]
        assert set(data) == {"name", "keys", "createdAt", "updatedAt"}
        stored = _stored(owner, "hf")
        assert _decoded(stored) == {"token": "hf_abc", "user": " me "}  # as sent, untrimmed
        labels = stored["metadata"]["labels"]
        assert labels[manifests.LABEL_MANAGED_BY] == manifests.MANAGED_BY
        assert labels[manifests.LABEL_TENANT] == owner.slug
        assert labels[manifests.LABEL_SECRET] == "hf"

    def test_replaces_keys_and_values_when_sent_again(self, owner):
        client = client_for(owner)
        self.get_success_response(
            client, status=201, data={"name": "hf", "data": {"a": "1", "b": "2"}}
        )
        again = {"name": "hf", "data": {"b": "3", "c": "4"}}
        data = self.get_success_response(client, status=200, data=again).json()["data"]
        assert data["keys"] == ["b", "c"]
        assert _decoded(_stored(owner, "hf")) == {"b": "3", "c": "4"}
        assert TenantSecret.objects.filter(tenant=owner).count() == 1
        # A retry of the same request is the same answer, not a conflict.
        self.get_success_response(client, status=200, data=again)

    def test_writes_a_secret_left_by_a_lost_answer_when_no_row_exists(self, owner):
        kube.create(
            kube.SECRET,
            owner.namespace,
            manifests.build_secret(
                namespace=owner.namespace, tenant=owner.slug, name="hf", data={"old": "x"}
            ),
        )
        body = {"name": "hf", "data": {"token": "new"}}
        self.get_success_response(client_for(owner), status=201, data=body)
        assert _decoded(_stored(owner, "hf")) == {"token": "new"}

    def test_refuses_when_a_foreign_secret_has_the_name(self, owner):
        foreign = {"metadata": {"name": "secret-hf"}, "data": {"x": "eA=="}}
        kube.create(kube.SECRET, owner.namespace, foreign)
        error = self.get_error_response(
            client_for(owner),
            status=409,
            code="secret_conflict",
            data={"name": "hf", "data": {"token": "mine"}},
        )
        assert "not managed by this control plane" in error["message"]
        assert _decoded(_stored(owner, "hf")) == {"x": "x"}
        assert not TenantSecret.objects.filter(tenant=owner).exists()

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"name": "Bad_Name", "data": {"k": "v"}}, "name"),
            ({"name": "x" * 57, "data": {"k": "v"}}, "name"),
            ({"name": "hf", "data": {}}, "data"),
            ({"name": "hf", "data": {"bad key": "v"}}, "data.bad key"),
            ({"name": "hf", "data": {"..k": "v"}}, "data...k"),
            ({"name": "hf", "data": {"k": 1}}, "data"),
            ({"name": "hf", "data": ["k"]}, "data"),
            ({"name": "hf", "data": {"k": "v"}, "extra": 1}, "extra"),
            ({"name": "hf", "data": {f"k{i}": "v" for i in range(65)}}, "data"),
        ],
    )
    def test_refuses_bad_input_naming_the_field(self, owner, body, field):
        error = self.get_error_response(
            client_for(owner), status=400, code="invalid_request", data=body
        )
        fields = error["details"].get("fields", error["details"])
        assert any(key.startswith(field) for key in fields), error
        assert _stored(owner, "hf") is None

    def test_refuses_more_than_a_mebibyte(self, owner):
        body = {"name": "big", "data": {"a": "x" * (600 * 1024), "b": "y" * (600 * 1024)}}
        error = self.get_error_response(
            client_for(owner), status=400, code="invalid_request", data=body
        )
        assert "1 MiB" in str(error["details"])
        assert "xxxx" not in str(error)
        assert _stored(owner, "big") is None

    def test_takes_a_secret_just_under_a_mebibyte(self, owner):
        body = {"name": "big", "data": {"a": "x" * (1024 * 1024 - 1)}}
        self.get_success_response(client_for(owner), status=201, data=body)

    @override_settings(SECRETS_PER_TENANT=2)
    def test_refuses_one_more_than_the_limit_but_replaces_one_held(self, owner):
        client = client_for(owner)
        for name in ("a", "b"):
            self.get_success_response(client, status=201, data={"name": name, "data": {"k": "v"}})
        error = self.get_error_response(
            client, status=409, code="limit_exceeded", data={"name": "c", "data": {"k": "v"}}
        )
        assert error["details"] == {"limit": "secrets", "used": 2, "hard": 2}
        self.get_success_response(client, status=200, data={"name": "a", "data": {"k": "w"}})
        quota = client.get("/api/v1/quota").json()["data"]["limits"]["secrets"]
        assert quota == {"hard": "2", "used": "2", "free": "0"}

    def test_statement_count(self, owner):
        client = client_for(owner)
        client.get("/api/v1/secrets")  # the key's first use is stamped apart
        self.assert_statement_count(client, data={"name": "hf", "data": {"k": "v"}})


@override_settings(SECRETS_PER_TENANT=2)
def test_the_namespace_quota_holds_secrets_to_the_limit_whoever_writes_them(owner):
    """The database's count refuses first; the cluster's ResourceQuota (`count/secrets`)
    holds the same line for anything that writes to the namespace past it."""
    ensure_tenant_namespace(owner)
    quota = kube.get(kube.RESOURCEQUOTA, owner.namespace, manifests.QUOTA_NAME)
    assert quota["spec"]["hard"]["count/secrets"] == "2"
    client = client_for(owner)
    for name in ("a", "b"):
        response = client.post("/api/v1/secrets", {"name": name, "data": {"k": "v"}}, format="json")
        assert response.status_code == 201, response.content
    extra = manifests.build_secret(
        namespace=owner.namespace, tenant=owner.slug, name="c", data={"k": "v"}
    )
    with pytest.raises(PermanentError, match="exceeded quota") as raised:
        kube.create(kube.SECRET, owner.namespace, extra)
    assert raised.value.status == 403
    assert _stored(owner, "c") is None


@pytest.mark.django_db(transaction=True)
def test_a_secret_before_the_namespace_exists_is_409_until_the_worker_has_made_it(
    cluster, celery_worker
):
    tenant = TenantFactory()
    client = client_for(tenant)
    body = {"name": "hf", "data": {"k": "v"}}
    response = client.post("/api/v1/secrets", body, format="json")
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "namespace_not_ready"
    assert response["Retry-After"] == "2"
    assert not TenantSecret.objects.filter(tenant=tenant).exists()
    # The refusal asked the worker for the namespace; once it is there, the resend is saved.
    wait_until(
        lambda: kube.get(kube.NAMESPACE, None, tenant.namespace),
        f"the worker to create {tenant.namespace}",
    )
    assert client.post("/api/v1/secrets", body, format="json").status_code == 201
    assert TenantSecret.objects.filter(tenant=tenant, name="hf").exists()


class TestListSecrets(EndpointTest):
    path = "/api/v1/secrets"

    def test_lists_by_name_a_page_at_a_time_without_values(self, owner):
        client = client_for(owner)
        other = TenantFactory()
        for name in ("c", "a", "b"):
            body = {"name": name, "data": {"token": f"value-of-{name}"}}
            assert client.post(self.path, body, format="json").status_code == 201
        TenantSecret.objects.create(tenant=other, name="zz", keys=["k"])
        first = self.get_success_response(client, query={"limit": 2}).json()
        assert [s["name"] for s in first["data"]] == ["a", "b"]
        assert "value-of" not in str(first)
        cursor = first["meta"]["nextCursor"]
        rest = self.get_success_response(client, query={"limit": 2, "cursor": cursor}).json()
        assert [s["name"] for s in rest["data"]] == ["c"]
        assert rest["meta"]["nextCursor"] is None
        # A cursor is the tenant's own.
        self.get_error_response(
            client_for(other), status=400, code="invalid_request", query={"cursor": cursor}
        )

    def test_statement_count(self, owner):
        client = client_for(owner)
        client.get(self.path)
        self.assert_statement_count(client)


class TestSecretDetail(EndpointTest):
    path = "/api/v1/secrets/{name}"

    def test_shows_one_and_404s_for_others(self, owner):
        client = client_for(owner)
        client.post("/api/v1/secrets", {"name": "hf", "data": {"t": "v"}}, format="json")
        data = self.get_success_response(client, name="hf").json()["data"]
        assert data["keys"] == ["t"]
        self.get_error_response(client, status=404, code="not_found", name="nope")
        self.get_error_response(client, status=404, code="not_found", name="Not_A_Name")
        self.get_error_response(
            client_for(TenantFactory()), status=404, code="not_found", name="hf"
        )

    def test_statement_count(self, owner):
        client = client_for(owner)
        client.post("/api/v1/secrets", {"name": "hf", "data": {"t": "v"}}, format="json")
        self.assert_statement_count(client, name="hf")


class TestDeleteSecret(EndpointTest):
    method = "delete"
    path = "/api/v1/secrets/{name}"

    def test_deletes_the_secret_and_its_row(self, owner):
        client = client_for(owner)
        client.post("/api/v1/secrets", {"name": "hf", "data": {"t": "v"}}, format="json")
        assert self.call(client, name="hf").status_code == 204
        assert _stored(owner, "hf") is None
        assert not TenantSecret.objects.filter(tenant=owner).exists()
        self.get_error_response(client, status=404, code="not_found", name="hf")

    def test_deletes_the_row_when_the_secret_is_already_gone(self, owner):
        client = client_for(owner)
        client.post("/api/v1/secrets", {"name": "hf", "data": {"t": "v"}}, format="json")
        kube.delete(kube.SECRET, owner.namespace, "secret-hf")
        assert self.call(client, name="hf").status_code == 204
        assert not TenantSecret.objects.filter(tenant=owner).exists()

    def test_statement_count(self, owner):
        client = client_for(owner)
        client.post("/api/v1/secrets", {"name": "hf", "data": {"t": "v"}}, format="json")
        self.assert_statement_count(client, name="hf")
