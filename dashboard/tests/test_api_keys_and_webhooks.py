"""A customer's own API keys and webhooks on the dashboard (the generic resource pages of
dashboard/resources.py): a key is shown once and then works on the API, a revoked one is
refused at once; a webhook's signing secret is shown once; neither secret lands in the
session, a redirect or a later page."""

from __future__ import annotations

import pytest
from django.test import Client

from tenancy import services, webhooks
from tenancy.models import ApiKey, WebhookEndpoint

pytestmark = pytest.mark.django_db

KEYS = "/api-keys/"
HOOKS = "/webhooks/"
RECEIVER = "http://127.0.0.1:9/hook"


def shown_once(body: str) -> str:
    return body.split('id="shown-once-secret" class="shown-once-secret">')[1].split("<")[0]


def units_with(key: str) -> int:
    return Client().get("/api/v1/gpu-units", HTTP_AUTHORIZATION=f"Bearer {key}").status_code


def test_a_key_made_on_the_page_is_shown_once_works_and_stops_working_when_revoked(
    member_client, tenant
):
    response = member_client.post(KEYS, {"name": "laptop gpuctl"})

    assert response.status_code == 200  # shown on this answer, not through a redirect
    body = response.content.decode()
    key = shown_once(body)
    made = ApiKey.objects.get(tenant=tenant)
    assert key.startswith(f"gcp_{made.prefix}_")
    assert made.name == "laptop gpuctl"
    assert f"API key {made.prefix} made" in body
    assert units_with(key) == 200
    assert key not in str(dict(member_client.session))
    listed = member_client.get(KEYS).content.decode()
    assert key not in listed
    row = listed.split(f'data-api-key="{made.prefix}"')[1].split("</tr>")[0]
    assert "laptop gpuctl" in row
    assert "Active" in row

    revoke = f"/api-keys/{made.prefix}/revoke/"
    assert "Requests with it are refused" in member_client.get(revoke).content.decode()
    follow = member_client.post(revoke, follow=True).content.decode()

    assert f"API key {made.prefix} revoked" in follow
    assert units_with(key) == 401
    assert "Revoked" in follow.split(f'data-api-key="{made.prefix}"')[1].split("</tr>")[0]
    again = member_client.post(revoke, follow=True).content.decode()
    assert f"API key {made.prefix} was already revoked." in again


def test_a_customer_cannot_revoke_another_tenants_key(member_client, other_tenant):
    theirs, key = services.create_api_key(tenant=other_tenant, name="theirs")

    assert member_client.get(f"/api-keys/{theirs.prefix}/revoke/").status_code == 404
    member_client.post(f"/api-keys/{theirs.prefix}/revoke/")

    assert units_with(key) == 200


def test_past_the_limit_the_form_says_to_revoke_one_first(member_client, tenant, settings):
    settings.API_KEYS_PER_TENANT = 1
    member_client.post(KEYS, {"name": "first"})

    body = member_client.post(KEYS, {"name": "second"}).content.decode()

    assert "The key was not made" in body
    assert "as many active API keys as it may (1). Revoke one it no longer uses first." in body
    assert ApiKey.objects.filter(tenant=tenant).count() == 1


def test_a_webhook_added_on_the_page_shows_its_secret_once(member_client, tenant, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]

    response = member_client.post(
        HOOKS,
        {"url": RECEIVER, "events": ["unit.phase_changed", "unit.auto_stopped"]},
    )

    assert response.status_code == 200
    hook = WebhookEndpoint.objects.get(tenant=tenant)
    assert shown_once(response.content.decode()) == hook.secret
    assert hook.events == ["unit.auto_stopped", "unit.phase_changed"]
    listed = member_client.get(HOOKS).content.decode()
    assert hook.secret not in listed
    row = listed.split(f'data-webhook="{hook.uid}"')[1].split("</tr>")[0]
    assert RECEIVER in row
    assert "<code>unit.phase_changed</code>" in row

    member_client.post(f"/webhooks/{hook.uid}/delete/")

    assert not WebhookEndpoint.objects.filter(pk=hook.pk).exists()


def test_a_webhook_the_service_refuses_is_reported_next_to_its_field(member_client, tenant):
    body = member_client.post(HOOKS, {"url": "ftp://example.com/x", "events": ["*"]})
    text = body.content.decode()

    assert "The webhook was not added" in text
    assert text.split('id="id_url_error"')[1].split("</ul>")[0].count("<li>") == 1
    assert not WebhookEndpoint.objects.filter(tenant=tenant).exists()


def test_staff_see_a_tenants_keys_and_webhooks_without_their_secrets(staff_client, tenant):
    made, key = services.create_api_key(tenant=tenant, name="ci")
    hook = WebhookEndpoint.objects.create(
        tenant=tenant, url="https://hooks.example.com/x", events=["*"], secret="whsec_dGVzdA=="
    )

    keys = staff_client.get(KEYS, {"tenant": tenant.slug}).content.decode()
    hooks = staff_client.get(HOOKS, {"tenant": tenant.slug}).content.decode()

    assert f'data-api-key="{made.prefix}"' in keys
    assert key not in keys
    assert f'data-webhook="{hook.uid}"' in hooks
    assert "every event" in hooks
    assert hook.secret not in hooks


def test_a_webhook_is_tested_its_deliveries_read_and_its_secret_rotated(
    member_client, tenant, settings
):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    hook = webhooks.create_endpoint(tenant=tenant, url=RECEIVER, events=["*"])
    first_secret = hook.secret
    listed = member_client.get(HOOKS).content.decode()
    assert f"/webhooks/{hook.uid}/deliveries/" in listed

    sent = member_client.post(f"/webhooks/{hook.uid}/test/", follow=True).content.decode()

    assert "Test event sent" in sent
    assert "<code>webhook.test</code>" in sent
    assert hook.deliveries.filter(event_type="webhook.test").count() == 1

    rotated = member_client.post(f"/webhooks/{hook.uid}/rotate/")

    assert rotated.status_code == 200
    hook.refresh_from_db()
    assert hook.secret != first_secret
    assert hook.previous_secret == first_secret
    body = rotated.content.decode()
    assert shown_once(body) == hook.secret
    assert "The previous one keeps signing beside it until" in body
    assert hook.secret not in member_client.get(HOOKS).content.decode()
