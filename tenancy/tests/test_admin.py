"""The tenancy admin: readable quotas and usage, and API keys added with their secret shown once."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from tenancy import webhooks
from tenancy.models import ApiKey, Tenant, WebhookAttempt
from tenancy.services import hash_key
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

ADD_KEY_URL = reverse("admin:tenancy_apikey_add")


def test_tenant_usage_and_quota_read_as_cores_and_gib(admin_client):
    tenant = TenantFactory(quota_cpu="160", quota_memory="256Gi", quota_claims=64)
    Tenant.objects.filter(pk=tenant.pk).update(
        used_cpu_millicores=12_500, used_memory_bytes=249_108_103_168, used_claims=3
    )
    changelist = admin_client.get(reverse("admin:tenancy_tenant_changelist")).content.decode()
    assert "12.5 cores of 160 cores" in changelist
    assert "232 GiB of 256 GiB" in changelist
    assert "3 of 64" in changelist
    change = admin_client.get(reverse("admin:tenancy_tenant_change", args=[tenant.pk]))
    page = change.content.decode()
    assert "232 GiB" in page
    assert "12.5 cores" in page
    assert "249108103168" not in page
    assert "12500" not in page


def test_add_key_page_offers_tenant_and_name(admin_client):
    tenant = TenantFactory()
    response = admin_client.get(ADD_KEY_URL, {"tenant": tenant.pk})
    assert response.status_code == 200
    fields = response.context["adminform"].form.fields
    assert list(fields) == ["tenant", "name"]
    assert response.context["adminform"].form.initial["tenant"] == str(tenant.pk)


def test_add_key_creates_it_and_shows_the_secret_once_with_a_copy_button(admin_client):
    tenant = TenantFactory()
    response = admin_client.post(ADD_KEY_URL, {"tenant": tenant.pk, "name": "ci"})

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    api_key = ApiKey.objects.get(tenant=tenant)
    assert api_key.name == "ci"
    secret = response.context["new_keys"][0][1]
    assert secret.startswith(f"gcp_{api_key.prefix}_")
    assert api_key.key_hash == hash_key(secret)  # only its hash is kept
    page = response.content.decode()
    assert page.count(f'value="{secret}"') == 1
    assert 'class="button copy-key"' in page
    assert "only time it is shown" in page
    # Nowhere to be seen again, not even in a message.
    assert not list(response.context["messages"])
    change = admin_client.get(reverse("admin:tenancy_apikey_change", args=[api_key.pk]))
    assert secret not in change.content.decode()
    assert api_key.prefix in change.content.decode()

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/gpu-units").status_code == 200


def test_add_key_refuses_a_missing_tenant_and_creates_nothing(admin_client):
    response = admin_client.post(ADD_KEY_URL, {"name": "ci"})
    assert response.status_code == 200
    assert "tenant" in response.context["adminform"].form.errors
    assert not ApiKey.objects.exists()


def test_tenant_action_shows_each_new_secret_on_the_page_not_in_a_message(admin_client):
    first, second = TenantFactory(), TenantFactory()
    response = admin_client.post(
        reverse("admin:tenancy_tenant_changelist"),
        {"action": "create_key", "_selected_action": [first.pk, second.pk]},
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    shown = {api_key.tenant: secret for api_key, secret in response.context["new_keys"]}
    assert set(shown) == {first, second}
    page = response.content.decode()
    for tenant, secret in shown.items():
        assert hash_key(secret) == ApiKey.objects.get(tenant=tenant).key_hash
        assert f'value="{secret}"' in page
    assert page.count('class="button copy-key"') == 2
    assert not list(response.context["messages"])


def test_webhooks_and_their_deliveries_show_without_the_secret(admin_client, settings):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    endpoint = webhooks.create_endpoint(
        tenant=TenantFactory(), url="http://127.0.0.1:9/hook", events=["*"]
    )
    delivery = webhooks.send_test(endpoint)
    WebhookAttempt.objects.create(delivery=delivery, status=500, error="not 2xx", duration_ms=7)
    listed = admin_client.get(reverse("admin:tenancy_webhookendpoint_changelist"))
    assert listed.status_code == 200
    assert "http://127.0.0.1:9/hook" in listed.content.decode()
    page = admin_client.get(reverse("admin:tenancy_webhookendpoint_change", args=[endpoint.pk]))
    assert page.status_code == 200
    assert "webhook.test" in page.content.decode()
    assert endpoint.secret not in page.content.decode()
    shown = admin_client.get(reverse("admin:tenancy_webhookdelivery_change", args=[delivery.pk]))
    assert shown.status_code == 200
    assert "500 not 2xx (7 ms)" in shown.content.decode()
    assert endpoint.secret not in shown.content.decode()
