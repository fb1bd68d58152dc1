"""A package's ephemeral storage: validated on save, round-tripped through the catalog YAML,
shown in the admin, snapshotted by the units ordered from it and written into their pods'
ephemeral-storage request and limit (PACKAGE_EPHEMERAL_STORAGE when the package names none)."""

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.urls import reverse

from catalog.models import Package
from catalog.services import CatalogImportError, export_catalog, import_catalog
from catalog.tests.factories import PackageFactory
from runtime import manifests, orders
from runtime.models import GPUUnit
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

pytestmark = pytest.mark.django_db

CATALOG = """\
packages:
  - id: gpu-rtx3080-2x-cpu10-mem40g
    specName: gpu.rtx3080.2x.10c.40g
    cpu: "10"
    memory: 40Gi
    gpu: 2
    allocation:
      deviceClassName: nvidia-rtx-3080
      claimRequestName: gpu
      count: 2
    ephemeralStorage: 50Gi
  - id: gpu-rtx3080-1x-cpu5-mem20g
    specName: gpu.rtx3080.1x.5c.20g
    cpu: "5"
    memory: 20Gi
    gpu: 1
    allocation:
      deviceClassName: nvidia-rtx-3080
      claimRequestName: gpu
      count: 1
"""


def test_the_catalog_yaml_round_trips_ephemeral_storage():
    import_catalog(text=CATALOG)
    assert Package.objects.get(id="gpu-rtx3080-2x-cpu10-mem40g").ephemeral_storage == "50Gi"
    assert Package.objects.get(id="gpu-rtx3080-1x-cpu5-mem20g").ephemeral_storage == ""
    exported = yaml.safe_load(export_catalog())["packages"]
    assert [entry.get("ephemeralStorage") for entry in exported] == [None, "50Gi"]
    assert yaml.safe_load(export_catalog()) == {
        "packages": sorted(yaml.safe_load(CATALOG)["packages"], key=lambda e: e["id"])
    }
    # The same amount written another way is no change; another amount is one.
    plan = import_catalog(text=CATALOG.replace("50Gi", "51200Mi"), dry_run=True)
    assert plan.changed == []
    plan = import_catalog(text=CATALOG.replace("50Gi", "60Gi"), dry_run=True)
    ((_, change),) = plan.changed
    assert change.fields == {"ephemeralStorage": ("50Gi", "60Gi")}


@pytest.mark.parametrize("value", ["0", "-1Gi", "lots", "1.5"])
def test_ephemeral_storage_must_be_a_positive_number_of_bytes(value):
    with pytest.raises(CatalogImportError) as caught:
        import_catalog(text=CATALOG.replace("50Gi", value))
    assert any(p.startswith("packages[0].ephemeralStorage:") for p in caught.value.problems)
    package = PackageFactory.build(ephemeral_storage=value)
    with pytest.raises(ValidationError) as raised:
        package.full_clean()
    assert "ephemeral_storage" in raised.value.message_dict


def test_the_admin_shows_and_saves_ephemeral_storage(admin_client):
    package = PackageFactory()
    url = reverse("admin:catalog_package_change", args=[package.pk])
    page = admin_client.get(url)
    assert 'name="ephemeral_storage"' in page.content.decode()
    form = page.context["adminform"].form
    data = {
        name: form[name].value() if form[name].value() is not None else "" for name in form.fields
    }
    data.update(
        ephemeral_storage="80Gi",
        selectors="\n".join(package.selectors),
        capacity="{}",
        alternatives="[]",
        alternative_prices="{}",
        active="on",
    )
    assert admin_client.post(url, data).status_code == 302
    package.refresh_from_db()
    assert package.ephemeral_storage == "80Gi"


def test_a_unit_snapshots_its_package_s_ephemeral_storage_or_the_default(settings):
    settings.PACKAGE_EPHEMERAL_STORAGE = "25Gi"
    tenant = TenantFactory()
    sized = PackageFactory(id="sized", ephemeral_storage="50Gi")
    plain = PackageFactory(id="plain")
    a = orders.create_unit(
        tenant=tenant, operation_id="a", name="a", package_id=sized.id, image="busybox"
    ).unit
    b = orders.create_unit(
        tenant=tenant, operation_id="b", name="b", package_id=plain.id, image="busybox"
    ).unit
    assert (a.ephemeral_storage, b.ephemeral_storage) == ("50Gi", "25Gi")
    # A later change of the package leaves the unit as it was ordered.
    Package.objects.filter(id="sized").update(ephemeral_storage="1Gi")
    a.refresh_from_db()
    assert a.ephemeral_storage == "50Gi"
    container = manifests.build_pod(a.contract(request_hash=""), owner_uid="u")["spec"][
        "containers"
    ][0]
    assert container["resources"]["requests"]["ephemeral-storage"] == "50Gi"
    assert container["resources"]["limits"]["ephemeral-storage"] == "50Gi"


def _contract(**overrides) -> manifests.UnitContract:
    fields = {
        "name": "u",
        "namespace": "ns",
        "tenant": "t",
        "operation_id": "op",
        "request_hash": "",
        "package_id": "p",
        "spec_name": "s",
        "image": "busybox",
        "cpu": "10",
        "memory": "40Gi",
        "memory_bytes": 40 * 2**30,
        "gpu": 1,
        "device_class_name": "nvidia-h100",
        "claim_name": "unit-u-gpu",
        "claim_request_name": "gpu",
        "count": 1,
        "ephemeral_storage": "20Gi",
        "ssh_image": "sshd:1",
    }
    fields.update(overrides)
    return manifests.UnitContract(**fields)


def test_the_pod_carries_the_ephemeral_storage_limit():
    pod = manifests.build_pod(_contract(), owner_uid="uid")
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["requests"] == {
        "cpu": "10",
        "memory": "40Gi",
        "ephemeral-storage": "20Gi",
    }
    assert container["resources"]["limits"] == container["resources"]["requests"]


def test_the_ssh_sidecar_s_disk_comes_out_of_the_workload_s():
    pod = manifests.build_pod(_contract(ssh=True), owner_uid="uid")
    (sidecar,) = pod["spec"]["initContainers"]
    (workload,) = pod["spec"]["containers"]
    assert sidecar["resources"]["limits"]["ephemeral-storage"] == "1Gi"
    assert workload["resources"]["limits"]["ephemeral-storage"] == "19Gi"


def test_a_unit_ordered_before_packages_had_ephemeral_storage_keeps_a_pod_without_it():
    pod = manifests.build_pod(_contract(ephemeral_storage="", ssh=True), owner_uid="uid")
    for container in (*pod["spec"]["containers"], *pod["spec"]["initContainers"]):
        assert "ephemeral-storage" not in container["resources"]["limits"]


def test_a_package_with_more_disk_than_the_tenant_may_have_is_refused():
    PackageFactory(id="big", ephemeral_storage="50Gi")
    response = client_for(TenantFactory(quota_ephemeral_storage="40Gi")).post(
        "/api/v1/gpu-units",
        {"operationID": "big", "name": "big", "packageID": "big", "image": "busybox"},
        format="json",
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {
        "limit": "limits.ephemeral-storage",
        "used": "0",
        "requested": "50Gi",
        "hard": "40Gi",
        "largerThanQuota": True,
    }
    assert not GPUUnit.objects.exists()
