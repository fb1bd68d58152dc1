"""Management commands and admin pages for tenants and keys."""

from decimal import Decimal
from importlib import import_module
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from rest_framework.test import APIClient

from tenancy.models import ApiKey, Tenant
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def test_default_tenant_has_the_article_namespace_and_quota():
    """What runtime/0002 makes on a fresh database. Run here on the model as it stands: its
    row is gone once any transactional test has run in this process (their flush empties
    every table), so the test makes it again the way `migrate` did."""

    class MigrationApps:
        def get_model(self, app_label: str, name: str) -> type[Tenant]:
            assert (app_label, name) == ("runtime", "Tenant")
            return Tenant

    Tenant.objects.filter(slug="default").delete()
    import_module("runtime.migrations.0002_default_tenant").create_default_tenant(
        MigrationApps(), None
    )
    tenant = Tenant.objects.get(slug="default")
    assert (tenant.namespace, tenant.quota_cpu, tenant.quota_memory, tenant.quota_claims) == (
        "runtime-instance",
        "160",
        "256Gi",
        64,
    )


def test_create_tenant_command():
    out = StringIO()
    call_command(
        "create_tenant",
        "acme",
        "--namespace",
        "acme-gpu",
        "--cpu",
        "32",
        "--memory",
        "128Gi",
        "--claims",
        "8",
        "--operator",
        stdout=out,
    )
    tenant = Tenant.objects.get(slug="acme")
    assert (tenant.namespace, tenant.quota_cpu, tenant.quota_claims, tenant.is_operator) == (
        "acme-gpu",
        "32",
        8,
        True,
    )
    call_command("create_tenant", "acme", "--if-missing", stdout=out)
    with pytest.raises(CommandError, match="namespace"):
        call_command("create_tenant", "bad", "--namespace", "Not_A_Label")


def test_create_api_key_prints_a_working_key_on_its_last_line():
    tenant = TenantFactory()
    out = StringIO()
    call_command("create_api_key", "--tenant", tenant.slug, stdout=out, stderr=StringIO())
    key = out.getvalue().strip().splitlines()[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/gpu-units").status_code == 200
    with pytest.raises(CommandError):
        call_command("create_api_key", "--tenant", "nobody")


def test_admin_pages_render(admin_client):
    tenant = TenantFactory()
    for name in ("tenant", "apikey"):
        assert admin_client.get(reverse(f"admin:tenancy_{name}_changelist")).status_code == 200
    assert (
        admin_client.get(reverse("admin:tenancy_tenant_change", args=[tenant.pk])).status_code
        == 200
    )


def test_admin_shows_the_tenant_usage_but_does_not_take_it_from_the_form(admin_client):
    tenant = TenantFactory()
    Tenant.objects.filter(pk=tenant.pk).update(used_cpu_millicores=2500, used_claims=3)
    url = reverse("admin:tenancy_tenant_change", args=[tenant.pk])
    page = admin_client.get(url).content.decode()
    assert "CPU used" in page
    assert 'name="used_claims"' not in page
    admin_client.post(
        url,
        {
            "slug": tenant.slug,
            "display_name": "renamed",
            "quota_cpu": tenant.quota_cpu,
            "quota_memory": tenant.quota_memory,
            "quota_claims": tenant.quota_claims,
            "quota_storage": tenant.quota_storage,
            "quota_storages": tenant.quota_storages,
            "quota_ephemeral_storage": tenant.quota_ephemeral_storage,
            "budget_mode": "enforce",
            "budget_grace": "30m",
            "monthly_budget": "250.00",
            "used_claims": 0,
            "api_keys-TOTAL_FORMS": 0,
            "api_keys-INITIAL_FORMS": 0,
        },
    )
    tenant.refresh_from_db()
    assert (tenant.display_name, tenant.used_claims) == ("renamed", 3)
    assert (tenant.monthly_budget, tenant.budget_mode, tenant.budget_grace) == (
        Decimal("250.00"),
        "enforce",
        "30m",
    )


def test_admin_creates_a_key_once_and_revokes(admin_client):
    tenant = TenantFactory()
    response = admin_client.post(
        reverse("admin:tenancy_tenant_changelist"),
        {"action": "create_key", "_selected_action": [tenant.pk]},
    )
    [(_api_key, key)] = response.context["new_keys"]
    api_key = ApiKey.objects.get(tenant=tenant)
    assert key.startswith(f"gcp_{api_key.prefix}_")
    admin_client.post(
        reverse("admin:tenancy_apikey_changelist"),
        {"action": "revoke", "_selected_action": [api_key.pk]},
    )
    api_key.refresh_from_db()
    assert api_key.revoked_at is not None
