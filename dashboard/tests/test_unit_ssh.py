"""SSH in the dashboard: the order form enables it with the tenant's registered keys (all, or
those ticked) through the API's rules and the order service; the unit page shows the exact ssh
command to copy, live with the unit; and no key material or API key secret reaches any page."""

from __future__ import annotations

import pytest

from dashboard.tests.conftest import client_for, make_unit, make_user
from dashboard.tests.test_views import detail, live, order
from runtime.models import GPUUnit
from tenancy import services
from tenancy.models import SSHKey
from tenancy.tests.test_sshkeys import ECDSA384, ED25519

pytestmark = pytest.mark.django_db

NEW = "/units/new"
KEYS = "/ssh-keys/"


@pytest.fixture
def public_host(settings):
    settings.ACCESS_TCP_HOST = "203.0.113.7"


@pytest.fixture
def keys(tenant) -> list[SSHKey]:
    return [
        services.add_ssh_key(tenant=tenant, name="laptop", public_key=f"{ED25519} me@laptop"),
        services.add_ssh_key(tenant=tenant, name="desktop", public_key=ECDSA384),
    ]


def ssh_card(body: str) -> str:
    return body.split('aria-labelledby="ssh-heading"')[1].split("</section>")[0]


def ssh_errors(body: str) -> str:
    return body.split('id="id_ssh_error"')[1].split("</ul>")[0]


class TestOrderForm:
    def test_offers_ssh_and_each_of_the_tenants_keys(self, member_client, package, keys):
        body = member_client.get(NEW).content.decode()
        assert "<legend>SSH</legend>" in body
        assert 'name="ssh" id="id_ssh"' in body
        assert "Enable SSH with my registered keys" in body
        for name in ("desktop", "laptop"):
            assert f'name="ssh_keys" value="{name}"' in body
        assert "None ticked: every key registered now." in body

    def test_says_so_and_links_the_keys_page_when_the_tenant_has_no_key(
        self, member_client, package
    ):
        body = member_client.get(NEW).content.decode()
        assert 'name="ssh" id="id_ssh"' in body
        assert 'name="ssh_keys"' not in body
        assert f'You have no SSH key yet: <a href="{KEYS}">add one on the SSH keys page</a>' in body

    def test_ssh_with_no_key_ticked_gives_the_unit_every_key(self, member_client, package, keys):
        response = order(member_client, ssh="on")
        unit = GPUUnit.objects.get()
        assert response["Location"] == detail(unit)
        assert unit.ssh == {"enabled": True, "keys": ["desktop", "laptop"]}

    def test_ssh_with_keys_ticked_gives_the_unit_those(self, member_client, package, keys):
        order(member_client, ssh="on", ssh_keys=["laptop"])
        assert GPUUnit.objects.get().ssh == {"enabled": True, "keys": ["laptop"]}

    def test_no_ssh_unless_ticked(self, member_client, package, keys):
        order(member_client)
        assert GPUUnit.objects.get().ssh == {}

    def test_keys_ticked_without_ssh_are_refused_next_to_them(self, member_client, package, keys):
        body = order(member_client, ssh_keys=["laptop"]).content.decode()
        errors = body.split('id="id_ssh_keys_error"')[1].split("</ul>")[0]
        assert "Tick “Enable SSH with my registered keys” to let these keys in" in errors
        assert '<a href="#id_ssh_keys_0">SSH keys to let in</a>' in body
        assert not GPUUnit.objects.exists()

    def test_ssh_without_a_registered_key_is_refused_on_the_ssh_field(self, member_client, package):
        response = order(member_client, ssh="on")
        assert response.status_code == 200
        body = response.content.decode()
        assert "the tenant has no SSH key." in ssh_errors(body)
        assert '<a href="#id_ssh">Enable SSH with my registered keys</a>' in body
        assert not GPUUnit.objects.exists()

    def test_a_key_deleted_since_the_form_was_shown_is_named_on_the_ssh_field(
        self, member_client, package, keys, tenant
    ):
        services.remove_ssh_key(tenant=tenant, name="desktop")
        body = order(member_client, ssh="on", ssh_keys=["laptop", "desktop"]).content.decode()
        assert "the tenant has no SSH key desktop." in ssh_errors(body)
        assert 'value="laptop" id="id_ssh_keys_0" checked' in body  # kept, to be corrected
        assert not GPUUnit.objects.exists()

    def test_a_name_that_is_no_key_name_is_named_on_the_ssh_field(
        self, member_client, package, keys
    ):
        body = order(member_client, ssh="on", ssh_keys=["Not A Label"]).content.decode()
        assert "Not A Label: not an SSH key name" in ssh_errors(body)
        assert not GPUUnit.objects.exists()

    def test_staff_order_with_all_of_the_chosen_tenants_keys(
        self, staff_client, package, keys, tenant
    ):
        body = staff_client.get(NEW).content.decode()
        assert "The unit gets all of the chosen tenant's keys" in body
        assert 'name="ssh_keys"' not in body
        order(staff_client, tenant=tenant.pk, ssh="on")
        assert GPUUnit.objects.get().ssh == {"enabled": True, "keys": ["desktop", "laptop"]}


class TestUnitPage:
    def test_shows_the_exact_command_to_copy_and_the_keys_it_lets_in(
        self, member_client, tenant, keys, public_host
    ):
        unit = make_unit(
            tenant,
            "shell",
            ssh={"enabled": True, "keys": ["desktop", "laptop"]},
            exposed={"sshNodePort": 31022},
        )
        card = ssh_card(member_client.get(detail(unit)).content.decode())
        command = "ssh -p 31022 runtime@203.0.113.7"
        assert f'<code id="ssh-command">{command}</code>' in card
        assert 'data-copy="ssh-command" hidden>Copy' in card
        assert "<dt>Username</dt><dd><code>runtime</code></dd>" in card
        assert "<dt>Host</dt><dd><code>203.0.113.7</code></dd>" in card
        assert "<dt>Port</dt><dd><code>31022</code></dd>" in card
        assert f'<a href="{KEYS}#key-desktop"><code>desktop</code></a>' in card
        assert f'<a href="{KEYS}#key-laptop"><code>laptop</code></a>' in card

    def test_command_is_not_known_until_the_node_port_is(
        self, member_client, tenant, keys, public_host
    ):
        unit = make_unit(
            tenant, "shell", phase="Provisioning", ssh={"enabled": True, "keys": ["laptop"]}
        )
        card = ssh_card(member_client.get(detail(unit)).content.decode())
        assert "Not known yet: it appears once the cluster has assigned the unit's SSH port." in (
            card
        )
        assert "The command works once the unit is Running." in card
        assert 'id="ssh-command"' not in card

    def test_command_is_not_known_without_a_public_host(self, member_client, tenant, keys):
        unit = make_unit(
            tenant,
            "shell",
            ssh={"enabled": True, "keys": ["laptop"]},
            exposed={"sshNodePort": 31022},
        )
        card = ssh_card(member_client.get(detail(unit)).content.decode())
        assert "no public host is set up for SSH here" in card
        assert "<dt>Port</dt><dd><code>31022</code></dd>" in card
        assert 'id="ssh-command"' not in card

    def test_refreshes_with_the_units_status(self, member_client, tenant, keys, public_host):
        unit = make_unit(
            tenant, "shell", phase="Provisioning", ssh={"enabled": True, "keys": ["laptop"]}
        )
        assert "Not known yet" in ssh_card(member_client.get(live(unit)).content.decode())
        GPUUnit.objects.filter(pk=unit.pk).update(phase="Running", exposed={"sshNodePort": 31022})
        card = ssh_card(member_client.get(live(unit)).content.decode())
        assert '<code id="ssh-command">ssh -p 31022 runtime@203.0.113.7</code>' in card

    def test_staff_links_go_to_the_units_tenants_keys(
        self, staff_client, tenant, keys, public_host
    ):
        unit = make_unit(tenant, "shell", ssh={"enabled": True, "keys": ["laptop"]})
        card = ssh_card(staff_client.get(detail(unit)).content.decode())
        assert f'href="{KEYS}?tenant={tenant.slug}#key-laptop"' in card

    def test_no_ssh_card_when_ssh_is_off(self, member_client, tenant, public_host):
        unit = make_unit(tenant, "plain", exposed={"sshNodePort": 31022})
        body = member_client.get(detail(unit)).content.decode()
        assert 'aria-labelledby="ssh-heading"' not in body

    def test_keys_page_rows_are_the_links_targets(self, member_client, keys):
        body = member_client.get(KEYS).content.decode()
        assert '<tr id="key-laptop" data-key="laptop">' in body


def test_no_key_material_nor_api_key_secret_in_any_page(auth_client, tenant, package, keys):
    """A unit ordered through the API with an API key, with SSH: neither the public keys'
    base64 bodies (the SSH keys page shows fingerprints and comments, never the key) nor the
    API key's secret appear on the unit page, its live part, the units list, the order form
    or the SSH keys page."""
    secret = auth_client._credentials["HTTP_AUTHORIZATION"].removeprefix("Bearer ")
    response = auth_client.post(
        "/api/v1/gpu-units",
        {
            "operationID": "ssh-secrets-1",
            "name": "shell",
            "packageID": package.id,
            "image": "python:3.12",
            "ssh": {"enabled": True},
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    unit = GPUUnit.objects.get(name="shell")
    GPUUnit.objects.filter(pk=unit.pk).update(phase="Running", exposed={"sshNodePort": 31022})
    client = client_for(make_user(tenant))
    pages = {path: client.get(path) for path in (detail(unit), live(unit), "/units/", NEW, KEYS)}
    for path, page in pages.items():
        assert page.status_code == 200, path
    body = {path: page.content.decode() for path, page in pages.items()}
    # The pages show what they are about: the keys by name, the fingerprints on the keys page.
    assert "laptop" in ssh_card(body[detail(unit)])
    assert keys[0].fingerprint in body[KEYS]
    assert "me@laptop" in body[KEYS]
    for key in keys:
        material = key.public_key.split()[1]
        for path, html in body.items():
            assert material[:24] not in html, f"key {key.name}'s material on {path}"
            assert key.fingerprint not in html or path == KEYS, f"a fingerprint on {path}"
    for path, html in body.items():
        assert secret not in html, path
        # The random part follows "gcp_<prefix>_" and may itself hold "_" (token_urlsafe).
        assert secret.split("_", 2)[2][:16] not in html, path
