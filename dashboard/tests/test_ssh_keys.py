"""The SSH keys page: a tenant lists, adds and deletes its keys through tenancy's services;
staff see a tenant's keys once they have chosen the tenant."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from dashboard.tests.conftest import client_for
from tenancy import services
from tenancy.models import SSHKey
from tenancy.tests.test_sshkeys import ED25519, ED25519_FP, RSA1024

pytestmark = pytest.mark.django_db

KEYS = "/ssh-keys/"
PRIVATE = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAA\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


def delete(name: str) -> str:
    return f"/ssh-keys/{name}/delete/"


def fresh_key(comment: str = "") -> str:
    text = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return f"{text} {comment}".strip()


def error_of(body: str, field: str) -> str:
    return body.split(f'id="id_{field}_error"')[1].split("</ul>")[0]


class TestList:
    def test_anonymous_users_are_sent_to_login(self, client):
        assert client.get(KEYS)["Location"] == f"/accounts/login/?next={KEYS}"
        assert client.get(delete("laptop"))["Location"].startswith("/accounts/login/")

    def test_lists_the_tenants_keys_with_type_bits_and_fingerprint(
        self, member_client, tenant, other_tenant
    ):
        services.add_ssh_key(tenant=tenant, name="laptop", public_key=ED25519)
        services.add_ssh_key(tenant=other_tenant, name="theirs", public_key=fresh_key())
        response = member_client.get(KEYS)
        body = response.content.decode()
        row = body.split('data-key="laptop"')[1].split("</tr>")[0]
        for text in (
            "laptop",
            "alice@laptop",
            "<code>ssh-ed25519</code>",
            ">256<",
            ED25519_FP,
            SSHKey.objects.get(name="laptop").created_at.strftime("%Y-%m-%d %H:%M"),
            f'href="{delete("laptop")}"',
        ):
            assert text in row
        assert "theirs" not in body
        assert "1 SSH key<" in body
        assert f'<a href="{KEYS}" aria-current="page">SSH keys</a>' in body

    def test_no_keys_yet_says_so(self, member_client):
        assert "No SSH keys yet" in member_client.get(KEYS).content.decode()


class TestAdd:
    def test_adds_the_key_and_shows_its_fingerprint(self, member_client, tenant):
        response = member_client.post(KEYS, {"name": " Laptop ", "public_key": f"{ED25519}\n"})
        assert response.status_code == 302
        assert response["Location"] == KEYS
        key = SSHKey.objects.get()
        assert (key.tenant, key.name, key.fingerprint) == (tenant, "laptop", ED25519_FP)
        assert f"SSH key laptop added ({ED25519_FP})" in member_client.get(KEYS).content.decode()

    @pytest.mark.parametrize(
        ("fields", "field", "message"),
        [
            ({"public_key": "ssh-ed25519 not-base64"}, "public_key", "does not parse"),
            ({"public_key": RSA1024}, "public_key", "3072"),
            ({"public_key": ""}, "public_key", "This field is required."),
            ({"name": "Not_A_Label"}, "name", "DNS-1123 label"),
            ({"name": ""}, "name", "This field is required."),
        ],
    )
    def test_bad_input_is_shown_next_to_the_field(self, member_client, fields, field, message):
        body = member_client.post(
            KEYS, {"name": "laptop", "public_key": ED25519, **fields}
        ).content.decode()
        assert message in error_of(body, field)
        assert "The key was not added" in body
        assert f'<a href="#id_{field}">' in body
        assert not SSHKey.objects.exists()

    def test_a_name_or_key_taken_is_shown_next_to_it(self, member_client, tenant):
        services.add_ssh_key(tenant=tenant, name="laptop", public_key=ED25519)
        body = member_client.post(
            KEYS, {"name": "laptop", "public_key": fresh_key()}
        ).content.decode()
        assert "A key named laptop exists" in error_of(body, "name")
        body = member_client.post(KEYS, {"name": "desk", "public_key": ED25519}).content.decode()
        assert "already registered as laptop" in error_of(body, "public_key")
        assert SSHKey.objects.count() == 1

    def test_a_private_key_is_refused_and_not_echoed(self, member_client):
        body = member_client.post(KEYS, {"name": "oops", "public_key": PRIVATE}).content.decode()
        assert "This is a private key" in error_of(body, "public_key")
        assert "b3BlbnNzaC1rZXktdjEAAAAA" not in body
        assert not SSHKey.objects.exists()

    def test_posts_without_csrf_token_are_refused(self, member, tenant):
        services.add_ssh_key(tenant=tenant, name="laptop", public_key=ED25519)
        strict = client_for(member, enforce_csrf_checks=True)
        assert strict.post(KEYS, {"name": "desk", "public_key": fresh_key()}).status_code == 403
        assert strict.post(delete("laptop")).status_code == 403
        assert SSHKey.objects.count() == 1


class TestDelete:
    def test_asks_for_confirmation_then_deletes(self, member_client, tenant):
        services.add_ssh_key(tenant=tenant, name="laptop", public_key=ED25519)
        page = member_client.get(delete("laptop")).content.decode()
        assert "Delete SSH key laptop?" in page
        assert ED25519_FP in page
        assert SSHKey.objects.count() == 1  # asking deletes nothing
        response = member_client.post(delete("laptop"))
        assert response["Location"] == KEYS
        assert not SSHKey.objects.exists()
        assert "SSH key laptop deleted." in member_client.get(KEYS).content.decode()

    def test_a_key_already_gone_says_so(self, member_client):
        assert member_client.get(delete("laptop")).status_code == 404
        member_client.post(delete("laptop"))
        assert "SSH key laptop was already deleted." in member_client.get(KEYS).content.decode()

    def test_another_tenants_key_is_not_found_and_stays(self, member_client, other_tenant):
        services.add_ssh_key(tenant=other_tenant, name="theirs", public_key=ED25519)
        assert member_client.get(delete("theirs")).status_code == 404
        member_client.post(delete("theirs"))
        assert SSHKey.objects.filter(tenant=other_tenant, name="theirs").exists()


class TestStaff:
    def test_see_keys_only_after_choosing_a_tenant(self, staff_client, tenant, other_tenant):
        services.add_ssh_key(tenant=tenant, name="laptop", public_key=ED25519)
        body = staff_client.get(KEYS).content.decode()
        assert f'<option value="{tenant.slug}">{tenant.slug}</option>' in body
        assert "choose the tenant" in body
        assert 'data-key="laptop"' not in body
        assert 'name="public_key"' not in body
        chosen = staff_client.get(KEYS, {"tenant": tenant.slug}).content.decode()
        assert f"SSH keys of tenant {tenant.slug}" in chosen
        assert 'data-key="laptop"' in chosen
        assert f'href="{delete("laptop")}?tenant={tenant.slug}"' in chosen
        other = staff_client.get(KEYS, {"tenant": other_tenant.slug}).content.decode()
        assert 'data-key="laptop"' not in other
        unknown = staff_client.get(KEYS, {"tenant": "no-such-tenant"}).content.decode()
        assert "Select a valid choice" in unknown

    def test_add_and_delete_for_the_chosen_tenant(self, staff_client, other_tenant):
        url = f"{KEYS}?tenant={other_tenant.slug}"
        response = staff_client.post(url, {"name": "ops", "public_key": ED25519})
        assert response["Location"] == url
        assert SSHKey.objects.get().tenant == other_tenant
        assert staff_client.get(f"{delete('ops')}?tenant={other_tenant.slug}").status_code == 200
        staff_client.post(f"{delete('ops')}?tenant={other_tenant.slug}")
        assert not SSHKey.objects.exists()

    def test_adding_without_a_tenant_adds_nothing(self, staff_client):
        response = staff_client.post(KEYS, {"name": "ops", "public_key": ED25519})
        assert response.status_code == 400
        assert not SSHKey.objects.exists()


def test_statements_flat_in_the_number_of_keys(member_client, tenant):
    from dashboard.tests.test_views import count_queries

    services.add_ssh_key(tenant=tenant, name="key-0", public_key=fresh_key())
    one = count_queries(member_client, KEYS)
    for index in range(1, 20):
        services.add_ssh_key(tenant=tenant, name=f"key-{index}", public_key=fresh_key())
    assert count_queries(member_client, KEYS) == one
