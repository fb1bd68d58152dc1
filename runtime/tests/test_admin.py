"""Admin pages for units and operations: shown, never edited."""

import pytest
from django.urls import reverse

from catalog.tests.factories import PackageFactory
from runtime import orders
from runtime.models import GPUStorage
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def test_unit_and_operation_pages_render_read_only(admin_client, package):
    tenant = TenantFactory()
    unit = orders.create_unit(
        tenant=tenant, operation_id="op-1", name="one", package_id=package.id, image="busybox"
    ).unit
    for name in ("gpuunit", "operation"):
        assert admin_client.get(reverse(f"admin:runtime_{name}_changelist")).status_code == 200
    page = admin_client.get(reverse("admin:runtime_gpuunit_change", args=[unit.pk]))
    assert page.status_code == 200
    assert b'name="phase"' not in page.content  # shown, not a form field
    assert admin_client.get(reverse("admin:runtime_gpuunit_add")).status_code == 403


@pytest.fixture
def package(db):
    return PackageFactory()


@pytest.mark.django_db
def test_storages_are_listed_read_only(admin_client, tenant):
    GPUStorage.objects.create(tenant=tenant, name="model-cache", size="50Gi", size_bytes=50 * 2**30)
    page = admin_client.get("/admin/runtime/gpustorage/")
    assert page.status_code == 200
    assert "model-cache" in page.content.decode()
    assert admin_client.get("/admin/runtime/gpustorage/add/").status_code == 403
