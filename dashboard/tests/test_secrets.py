"""The secrets page: a tenant lists, creates, replaces and deletes its secrets through
runtime.tenant_secrets, whose values go to the simulated cluster and never come back into a
page; staff see a tenant's secrets once they have chosen the tenant."""

from __future__ import annotations

import base64
import html

import pytest

from controlplane import kube
from dashboard.tests.conftest import client_for, make_unit, make_user
from dashboard.tests.test_views import count_queries
from runtime import manifests
from runtime.models import TenantSecret, UnitPhase
from tenancy.staff import STAFF_VIEWER
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

SECRETS = "/secrets/"
# A value no page may ever show: not in a list, a confirmation, a message or a form sent back.
VALUE = "zq-value-that-must-never-be-shown-8d41"


def delete(name: str) -> str:
    return f"/secrets/{name}/delete/"


def error_of(body: str, field: str) -> str:
    return html.unescape(body.split(f'id="id_{field}_error"')[1].split("</ul>")[0])


def stored(tenant, name: str) -> dict[str, str] | None:
    """The values of the tenant's Secret for `name` in the cluster, decoded (None: no Secret)."""
    secret = kube.get(kube.SECRET, tenant.namespace, manifests.secret_object_name(name))
    if secret is None:
        return None
    data = secret.get("data") or {}
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


def reader_of(tenant, name: str, unit: str = "reader", **fields):
    """A live unit whose environment reads key `token` of secret `name` (rows only)."""
    env = [{"name": "HF_TOKEN", "secretRef": {"name": name, "key": "token"}}]
    return make_unit(tenant, unit, template={"env": env}, **fields)


@pytest.fixture
def tenant(db, cluster):
    """The members' tenant, with its namespace in the simulated cluster; both removed after."""
    owner = TenantFactory()
    kube.create(kube.NAMESPACE, None, manifests.build_namespace(owner.namespace, tenant=owner.slug))
    yield owner
    for secret in kube.list_objects(kube.SECRET, namespace=owner.namespace):
        kube.delete(kube.SECRET, owner.namespace, secret["metadata"]["name"])
    kube.delete(kube.NAMESPACE, None, owner.namespace)


@pytest.fixture
def saved(member_client):
    """Secret hf (keys token and user) saved through the page."""
    response = member_client.post(SECRETS, {"name": "hf", "entries": f"token={VALUE}\nuser=me"})
    assert response.status_code == 302, response.content.decode()
    return TenantSecret.objects.get(name="hf")


class TestList:
    def test_anonymous_users_are_sent_to_login(self, client):
        assert client.get(SECRETS)["Location"] == f"/accounts/login/?next={SECRETS}"
        assert client.get(delete("hf"))["Location"].startswith("/accounts/login/")

    def test_lists_names_keys_users_and_times_never_values(
        self, member_client, tenant, other_tenant, saved, settings
    ):
        settings.SECRETS_PER_TENANT = 5
        reader_of(tenant, "hf")
        reader_of(tenant, "hf", unit="gone", phase=UnitPhase.TERMINATED)
        TenantSecret.objects.create(tenant=other_tenant, name="theirs", keys=["k"])
        body = member_client.get(SECRETS).content.decode()
        row = body.split('data-secret="hf"')[1].split("</tr>")[0]
        for text in (
            "<code>hf</code>",
            "<code>token</code>, <code>user</code>",
            ">reader</a>",
            saved.created_at.strftime("%Y-%m-%d %H:%M"),
            f'href="{delete("hf")}"',
            f'href="{SECRETS}?name=hf#add-heading"',
        ):
            assert text in row
        assert "gone" not in row  # a terminated unit reads nothing
        assert "theirs" not in body
        assert "1 of the 5 secrets the tenant may hold" in body
        assert f'<a href="{SECRETS}" aria-current="page">Secrets</a>' in body
        assert VALUE not in body

    def test_no_secrets_yet_says_so(self, member_client):
        assert "No secrets yet" in member_client.get(SECRETS).content.decode()

    def test_replace_link_fills_in_the_name(self, member_client, saved):
        body = member_client.get(SECRETS, {"name": "hf"}).content.decode()
        assert 'name="name" value="hf"' in body
        assert VALUE not in body

    def test_statements_flat_in_the_number_of_secrets(self, member_client, tenant):
        TenantSecret.objects.create(tenant=tenant, name="s-0", keys=["token"])
        reader_of(tenant, "s-0", unit="u-0")
        one = count_queries(member_client, SECRETS)
        for index in range(1, 20):
            TenantSecret.objects.create(tenant=tenant, name=f"s-{index}", keys=["token"])
            reader_of(tenant, f"s-{index}", unit=f"u-{index}")
        assert count_queries(member_client, SECRETS) == one


class TestSave:
    def test_creates_the_secret_in_the_cluster_and_names_its_keys(self, member_client, tenant):
        response = member_client.post(
            SECRETS, {"name": " HF ", "entries": f"token={VALUE}\r\nuser= me \r\n\r\n"}
        )
        assert response.status_code == 302
        assert response["Location"] == SECRETS
        secret = TenantSecret.objects.get()
        assert (secret.tenant, secret.name, secret.keys) == (tenant, "hf", ["token", "user"])
        assert stored(tenant, "hf") == {"token": VALUE, "user": " me "}  # as typed
        body = member_client.get(SECRETS).content.decode()
        assert "Secret hf created with keys token, user." in body
        assert VALUE not in body

    def test_sending_a_name_again_replaces_all_keys_and_values(self, member_client, tenant, saved):
        response = member_client.post(SECRETS, {"name": "hf", "entries": "other=2\ntoken=3"})
        assert response.status_code == 302
        assert stored(tenant, "hf") == {"other": "2", "token": "3"}
        assert list(TenantSecret.objects.values_list("name", "keys")) == [
            ("hf", ["other", "token"])
        ]
        body = member_client.get(SECRETS).content.decode()
        assert "Secret hf replaced; its keys are now other, token." in body

    @pytest.mark.parametrize(
        ("fields", "field", "message"),
        [
            ({"name": "Not_A_Label"}, "name", "DNS-1123 label"),
            ({"name": ""}, "name", "This field is required."),
            ({"entries": ""}, "entries", "This field is required."),
            ({"entries": f"token={VALUE}\n{VALUE}"}, "entries", "Line 2 has no '='"),
            ({"entries": f"token={VALUE}\n={VALUE}"}, "entries", "Line 2 has no key"),
            ({"entries": f"token={VALUE}\ntoken={VALUE}"}, "entries", "Key token is on lines 1"),
            ({"entries": f"bad key={VALUE}"}, "entries", "bad key: a key is"),
            ({"entries": f"a={VALUE}\nb={'x' * 1024 * 1024}"}, "entries", "1 MiB"),
        ],
    )
    def test_bad_input_is_shown_next_to_the_field_and_values_are_dropped(
        self, member_client, tenant, fields, field, message
    ):
        body = member_client.post(
            SECRETS, {"name": "hf", "entries": f"token={VALUE}", **fields}
        ).content.decode()
        assert message in error_of(body, field)
        assert "The secret was not saved" in body
        assert f'<a href="#id_{field}">' in body
        assert VALUE not in body
        assert "xxxxxxxx" not in body
        if fields.get("entries", "x"):
            assert "enter the keys and values again" in body
        assert not TenantSecret.objects.exists()
        assert stored(tenant, "hf") is None

    def test_a_bad_name_and_bad_entries_are_shown_at_once(self, member_client, tenant):
        body = member_client.post(
            SECRETS, {"name": "Bad_Name", "entries": f"token={VALUE}\nno equals"}
        ).content.decode()
        assert "DNS-1123 label" in error_of(body, "name")
        assert "Line 2 has no '='" in error_of(body, "entries")
        assert 'value="Bad_Name"' in body  # the name is no secret: it stays to be corrected
        assert VALUE not in body
        assert "no equals" not in body

    def test_refuses_one_more_than_the_limit_but_replaces_one_held(
        self, member_client, tenant, saved, settings
    ):
        settings.SECRETS_PER_TENANT = 1
        assert "holds as many secrets as it may (1)" in member_client.get(SECRETS).content.decode()
        body = member_client.post(SECRETS, {"name": "more", "entries": f"token={VALUE}"})
        body = body.content.decode()
        assert "The tenant holds as many secrets as it may (1)" in body
        assert VALUE not in body
        assert stored(tenant, "more") is None
        response = member_client.post(SECRETS, {"name": "hf", "entries": "token=new"})
        assert response.status_code == 302
        assert stored(tenant, "hf") == {"token": "new"}

    def test_a_foreign_secret_of_that_name_is_left_alone(self, member_client, tenant):
        kube.create(kube.SECRET, tenant.namespace, {"metadata": {"name": "secret-hf"}, "data": {}})
        body = member_client.post(SECRETS, {"name": "hf", "entries": f"token={VALUE}"})
        body = body.content.decode()
        assert "does not manage" in error_of(body, "name")
        assert VALUE not in body
        assert stored(tenant, "hf") == {}
        assert not TenantSecret.objects.exists()

    def test_a_namespace_being_prepared_says_to_try_again(self, monkeypatch, cluster):
        asked = []
        monkeypatch.setattr(
            "runtime.tenant_secrets.outbox.send", lambda task, pk: asked.append((task, pk))
        )
        fresh = TenantFactory()  # its namespace is not made yet
        client = client_for(make_user(fresh))
        body = client.post(SECRETS, {"name": "hf", "entries": f"token={VALUE}"})
        body = body.content.decode()
        assert "namespace is being prepared: try again in a few seconds" in body
        assert "enter the keys and values again" in body
        assert VALUE not in body
        assert asked == [("runtime.ensure_tenant_namespace", fresh.pk)]
        assert not TenantSecret.objects.exists()

    def test_posts_without_csrf_token_are_refused(self, member, tenant, saved):
        strict = client_for(member, enforce_csrf_checks=True)
        assert strict.post(SECRETS, {"name": "db", "entries": "k=v"}).status_code == 403
        assert strict.post(delete("hf")).status_code == 403
        assert list(TenantSecret.objects.values_list("name", flat=True)) == ["hf"]


class TestDelete:
    def test_asks_for_confirmation_then_deletes(self, member_client, tenant, saved):
        page = member_client.get(delete("hf")).content.decode()
        assert "Delete secret hf?" in page
        assert "<code>token</code>, <code>user</code>" in page
        assert VALUE not in page
        assert stored(tenant, "hf") is not None  # asking deletes nothing
        response = member_client.post(delete("hf"))
        assert response["Location"] == SECRETS
        assert not TenantSecret.objects.exists()
        assert stored(tenant, "hf") is None
        assert "Secret hf deleted." in member_client.get(SECRETS).content.decode()

    def test_a_secret_in_use_names_its_units_and_stays(self, member_client, tenant, saved):
        unit = reader_of(tenant, "hf")
        page = member_client.get(delete("hf")).content.decode()
        assert "cannot be deleted while a unit reads it" in page
        assert f'<a href="/units/{unit.uid}/">reader</a>' in page
        assert 'type="submit"' not in page.split("<main")[1]
        response = member_client.post(delete("hf"))
        assert response["Location"] == SECRETS
        body = member_client.get(SECRETS).content.decode()
        assert "Secret hf was not deleted: unit reader reads it" in body
        assert TenantSecret.objects.filter(name="hf").exists()
        assert stored(tenant, "hf") == {"token": VALUE, "user": "me"}

    def test_a_secret_already_gone_says_so(self, member_client):
        assert member_client.get(delete("hf")).status_code == 404
        member_client.post(delete("hf"))
        assert "Secret hf was already deleted." in member_client.get(SECRETS).content.decode()

    def test_another_tenants_secret_is_not_found_and_stays(self, member_client, other_tenant):
        TenantSecret.objects.create(tenant=other_tenant, name="theirs", keys=["k"])
        assert member_client.get(delete("theirs")).status_code == 404
        member_client.post(delete("theirs"))
        assert TenantSecret.objects.filter(tenant=other_tenant, name="theirs").exists()


class TestStaff:
    def test_see_secrets_only_after_choosing_a_tenant(
        self, staff_client, tenant, other_tenant, saved
    ):
        body = staff_client.get(SECRETS).content.decode()
        assert f'<option value="{tenant.slug}">{tenant.slug}</option>' in body
        assert "choose the tenant" in body
        assert 'data-secret="hf"' not in body
        assert 'name="entries"' not in body
        chosen = staff_client.get(SECRETS, {"tenant": tenant.slug}).content.decode()
        assert f"Secrets of tenant {tenant.slug}" in chosen
        assert 'data-secret="hf"' in chosen
        assert f'href="{delete("hf")}?tenant={tenant.slug}"' in chosen
        assert f'href="{SECRETS}?tenant={tenant.slug}&amp;name=hf#add-heading"' in chosen
        assert VALUE not in chosen
        other = staff_client.get(SECRETS, {"tenant": other_tenant.slug}).content.decode()
        assert 'data-secret="hf"' not in other
        unknown = staff_client.get(SECRETS, {"tenant": "no-such-tenant"}).content.decode()
        assert "Select a valid choice" in unknown

    def test_save_and_delete_for_the_chosen_tenant(self, staff_client, tenant):
        url = f"{SECRETS}?tenant={tenant.slug}"
        response = staff_client.post(url, {"name": "ops", "entries": f"token={VALUE}"})
        assert response["Location"] == url
        assert TenantSecret.objects.get().tenant == tenant
        assert stored(tenant, "ops") == {"token": VALUE}
        page = staff_client.get(f"{delete('ops')}?tenant={tenant.slug}")
        assert page.status_code == 200
        assert VALUE not in page.content.decode()
        staff_client.post(f"{delete('ops')}?tenant={tenant.slug}")
        assert not TenantSecret.objects.exists()
        assert stored(tenant, "ops") is None

    def test_saving_without_a_tenant_saves_nothing(self, staff_client):
        response = staff_client.post(SECRETS, {"name": "ops", "entries": "token=x"})
        assert response.status_code == 400
        assert not TenantSecret.objects.exists()


class TestPermissions:
    """As for SSH keys: staff-viewer reads every tenant's secrets and changes none; staff in
    neither group get 403; staff-editor acts (TestStaff)."""

    def test_staff_without_permission_get_403_and_nothing_changes(self, tenant, saved):
        client = client_for(make_user(staff=True, groups=()))
        query = f"?tenant={tenant.slug}"
        assert client.get(SECRETS + query).status_code == 403
        assert client.post(SECRETS + query, {"name": "x", "entries": "k=v"}).status_code == 403
        assert client.get(delete("hf") + query).status_code == 403
        assert client.post(delete("hf") + query).status_code == 403
        assert list(TenantSecret.objects.values_list("name", flat=True)) == ["hf"]
        assert stored(tenant, "hf") is not None

    def test_a_viewer_reads_and_is_offered_no_action(self, tenant, saved):
        client = client_for(make_user(staff=True, groups=(STAFF_VIEWER,)))
        query = f"?tenant={tenant.slug}"
        body = client.get(SECRETS + query).content.decode()
        assert 'data-secret="hf"' in body
        assert "/delete/" not in body
        assert "Replace" not in body
        assert 'name="entries"' not in body
        assert VALUE not in body
        assert client.post(SECRETS + query, {"name": "x", "entries": "k=v"}).status_code == 403
        assert client.get(delete("hf") + query).status_code == 403
        assert client.post(delete("hf") + query).status_code == 403
        assert list(TenantSecret.objects.values_list("name", flat=True)) == ["hf"]
        assert stored(tenant, "hf") is not None
