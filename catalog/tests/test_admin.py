"""The package admin: add/change with inline validation errors, toggle, YAML export."""

import pytest
import yaml
from django.urls import reverse

from catalog.models import Package
from catalog.tests.factories import PackageFactory

pytestmark = pytest.mark.django_db

ADD_URL = reverse("admin:catalog_package_add")
LIST_URL = reverse("admin:catalog_package_changelist")


def form_data(**overrides) -> dict:
    data = {
        "id": "gpu-l40s-4x-cpu48-mem192g",
        "spec_name": "gpu.l40s.4x.48c.192g",
        "active": "on",
        "cpu": "48",
        "memory": "192Gi",
        "gpu": "4",
        "device_class_name": "nvidia-l40s",
        "claim_request_name": "gpu",
        "count": "4",
        "selectors": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"\n',
        "capacity": "{}",
        "termination_grace_seconds": "30",
        "price": "4.76",
        "alternative_prices": "{}",
        "interruptible_price": "0",
        "preemption_notice_seconds": "120",
    }
    data.update(overrides)
    return data


def test_add_creates_package_with_selectors_one_per_line(admin_client):
    response = admin_client.post(ADD_URL, form_data())
    assert response.status_code == 302
    package = Package.objects.get()
    assert package.selectors == ['device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"']


def test_add_shows_each_field_error_inline_and_saves_nothing(admin_client):
    response = admin_client.post(
        ADD_URL, form_data(id="Bad_ID", cpu="0", count="2", selectors="device.driver ==")
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert set(errors) == {"id", "cpu", "count", "selectors"}
    assert "must equal gpu (4)" in errors["count"][0]
    assert "errorlist" in response.content.decode()
    assert not Package.objects.exists()


def test_change_keeps_id_read_only_and_validates(admin_client):
    package = PackageFactory(article=True)
    url = reverse("admin:catalog_package_change", args=[package.pk])
    page = admin_client.get(url)
    assert 'name="id"' not in page.content.decode()
    data = form_data(memory="lots")
    data.pop("id")
    response = admin_client.post(url, data)
    assert response.status_code == 200
    assert "memory" in response.context["adminform"].form.errors
    data["memory"] = "64Gi"
    assert admin_client.post(url, data).status_code == 302
    package.refresh_from_db()
    assert package.memory == "64Gi"
    assert package.id == "gpu-rtx3080-2x-cpu10-mem40g"


def test_change_shows_and_saves_the_termination_grace_within_its_range(admin_client):
    package = PackageFactory(article=True)
    url = reverse("admin:catalog_package_change", args=[package.pk])
    page = admin_client.get(url).content.decode()
    assert 'name="termination_grace_seconds"' in page
    assert 'value="30"' in page  # the default, in the box
    data = form_data(termination_grace_seconds="3601")
    data.pop("id")
    response = admin_client.post(url, data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["termination_grace_seconds"] == [
        "terminationGracePeriodSeconds must be a whole number of seconds from 0 to 3600, not 3601."
    ]
    data["termination_grace_seconds"] = "600"
    assert admin_client.post(url, data).status_code == 302
    package.refresh_from_db()
    assert package.termination_grace_seconds == 600


def test_list_searches_and_filters(admin_client):
    PackageFactory(article=True)
    PackageFactory(id="gpu-h100-1x", spec_name="h100", gpu=1, count=1, active=False)
    found = admin_client.get(LIST_URL, {"q": "h100"})
    assert list(found.context["cl"].result_list) == [Package.objects.get(id="gpu-h100-1x")]
    active = admin_client.get(LIST_URL, {"active__exact": "1"})
    assert [p.id for p in active.context["cl"].result_list] == ["gpu-rtx3080-2x-cpu10-mem40g"]


def test_export_action_downloads_selected_packages_as_yaml(admin_client):
    PackageFactory(article=True)
    PackageFactory(id="gpu-h100-1x", spec_name="h100", gpu=1, count=1)
    response = admin_client.post(
        LIST_URL, {"action": "export_yaml", "_selected_action": ["gpu-h100-1x"]}
    )
    assert response["Content-Type"] == "application/yaml"
    document = yaml.safe_load(response.content)
    assert [p["id"] for p in document["packages"]] == ["gpu-h100-1x"]


def test_deactivate_action(admin_client):
    PackageFactory(article=True)
    admin_client.post(
        LIST_URL,
        {"action": "deactivate", "_selected_action": ["gpu-rtx3080-2x-cpu10-mem40g"]},
    )
    assert Package.objects.get().active is False


def test_admin_requires_login(client):
    response = client.get(LIST_URL)
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


@pytest.fixture
def ordered_package(db):
    """A package with two live units (Running, Terminating) and one Terminated."""
    from runtime.models import UnitPhase
    from runtime.tests.factories import UnitFactory

    package = PackageFactory()
    for phase in (UnitPhase.RUNNING, UnitPhase.TERMINATING, UnitPhase.TERMINATED):
        UnitFactory(package=package, phase=phase)
    return package


def test_delete_asks_first_and_says_how_many_live_units_when_the_package_has_them(
    admin_client, ordered_package
):
    url = reverse("admin:catalog_package_delete", args=[ordered_package.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    assert page.context["live_units"] == 2
    assert "2 live units (not Terminated) were ordered from this package" in page.content.decode()
    assert Package.objects.filter(pk=ordered_package.pk).exists()  # asked, not done

    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    assert not Package.objects.filter(pk=ordered_package.pk).exists()


def test_delete_says_nothing_of_units_when_the_package_has_none_live(admin_client):
    package = PackageFactory()
    page = admin_client.get(reverse("admin:catalog_package_delete", args=[package.pk]))
    assert page.status_code == 200
    assert "live unit" not in page.content.decode()


def test_bulk_delete_asks_first_and_counts_live_units_of_all_selected(
    admin_client, ordered_package
):
    other = PackageFactory()
    selected = {"action": "delete_selected", "_selected_action": [ordered_package.pk, other.pk]}
    page = admin_client.post(LIST_URL, selected)
    assert page.status_code == 200
    assert "2 live units (not Terminated) were ordered from the selected packages" in (
        page.content.decode()
    )
    assert Package.objects.count() == 2

    admin_client.post(LIST_URL, {**selected, "post": "yes"})
    assert not Package.objects.filter(pk__in=[ordered_package.pk, other.pk]).exists()


def test_add_sells_a_package_as_interruptible_and_refuses_a_price_above_on_demand(admin_client):
    refused = admin_client.post(ADD_URL, form_data(interruptible="on", interruptible_price="5.00"))
    assert refused.status_code == 200
    assert "must not exceed the on-demand price" in refused.content.decode()
    assert not Package.objects.exists()
    response = admin_client.post(
        ADD_URL,
        form_data(interruptible="on", interruptible_price="1.50", preemption_notice_seconds="60"),
    )
    assert response.status_code == 302
    package = Package.objects.get()
    assert (package.interruptible, str(package.interruptible_price)) == (True, "1.5000")
    assert package.preemption_notice_seconds == 60
