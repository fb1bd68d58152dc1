"""The cluster registry in the admin: clusters enabled side by side, each reached as it says,
and a cluster holding live units stays."""

from __future__ import annotations

import pytest

from controlplane import kube
from inventory import clusters
from inventory.models import Cluster
from runtime.models import UnitPhase
from runtime.tests.factories import UnitFactory

pytestmark = pytest.mark.django_db

LIST_URL = "/admin/inventory/cluster/"


def form(**overrides):
    data = {
        "display_name": "",
        "region": "us-east",
        "position": "100",
        "kubeconfig": "",
        "kube_context": "",
        "pod_cidrs": "",
        "service_cidrs": "",
        "node_cidrs": "",
        "properties": "{}",
    }
    for key, value in overrides.items():
        if value is False:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def change_url(cluster: Cluster) -> str:
    return f"{LIST_URL}{cluster.pk}/change/"


def test_migrate_registered_the_process_cluster(admin_client):
    page = admin_client.get(LIST_URL)
    assert page.status_code == 200
    assert b"default" in page.content


def test_clusters_are_enabled_side_by_side_each_with_its_reach(admin_client):
    response = admin_client.post(
        f"{LIST_URL}add/",
        form(
            name="west-1",
            region="eu-west",
            enabled="on",
            kubeconfig="kubeconfig-west",
            pod_cidrs="10.9.0.0/16",
        ),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    west = Cluster.objects.get(name="west-1")
    assert (west.enabled, west.kubeconfig, west.pod_cidrs) == (
        True,
        "kubeconfig-west",
        ["10.9.0.0/16"],
    )
    assert sorted(Cluster.objects.filter(enabled=True).values_list("name", flat=True)) == [
        "default",
        "west-1",
    ]


def test_a_bad_cidr_or_region_is_shown_on_its_field(admin_client):
    response = admin_client.post(
        f"{LIST_URL}add/", form(name="west-1", region="EU West", node_cidrs="10.0.0.1/8")
    )
    errors = response.context["adminform"].form.errors
    assert set(errors) == {"region", "node_cidrs"}
    assert not Cluster.objects.filter(name="west-1").exists()


@pytest.mark.parametrize("path", ["/etc/shadow", "../kubeconfig", ".kube", "a/b"])
def test_a_kubeconfig_is_a_file_name_in_the_credentials_dir_never_a_path(admin_client, path):
    response = admin_client.post(f"{LIST_URL}add/", form(name="west-1", kubeconfig=path))
    errors = response.context["adminform"].form.errors
    assert "is not a file name" in errors["kubeconfig"][0]
    assert not Cluster.objects.filter(name="west-1").exists()


def test_a_row_that_names_a_path_is_never_read(settings, tmp_path):
    # Written around the model's validator (a queryset update): reaching it fails, and names
    # why, rather than reading the file.
    settings.CLUSTER_CREDENTIALS_DIR = str(tmp_path)
    Cluster.objects.create(name="west-1", region="eu-west", kubeconfig="kubeconfig-west-1")
    assert clusters.reach("west-1") == kube.Reach(kubeconfig=str(tmp_path / "kubeconfig-west-1"))
    Cluster.objects.filter(name="west-1").update(kubeconfig="/etc/shadow")
    with pytest.raises(kube.KubeError, match="is not a file name"):
        clusters.reach("west-1")


def test_a_cluster_holding_live_units_stays_enabled_and_registered(admin_client):
    home = Cluster.objects.get(name="default")
    unit = UnitFactory(cluster="default", region="default", phase=UnitPhase.RUNNING)
    response = admin_client.post(change_url(home), form(region="default", enabled=False))
    assert response.status_code == 200
    assert "1 live unit" in " ".join(response.context["adminform"].form.non_field_errors())
    assert Cluster.objects.get(name="default").enabled
    assert admin_client.get(f"{LIST_URL}{home.pk}/delete/").status_code == 403
    # Cordoning is how ops stop new placements there.
    assert (
        admin_client.post(
            change_url(home), form(region="default", enabled="on", cordoned="on")
        ).status_code
        == 302
    )
    assert Cluster.objects.get(name="default").cordoned
    unit.phase = UnitPhase.TERMINATED
    unit.save(update_fields=["phase"])
    assert (
        admin_client.post(change_url(home), form(region="default", enabled=False)).status_code
        == 302
    )
    assert not Cluster.objects.get(name="default").enabled


def test_the_list_shows_what_still_runs_in_each_cluster(admin_client):
    UnitFactory(cluster="default", region="default", phase=UnitPhase.RUNNING, name="a")
    UnitFactory(cluster="default", region="default", phase=UnitPhase.TERMINATED, name="b")
    page = admin_client.get(LIST_URL).content.decode()
    assert '<a href="/admin/runtime/gpuunit/?cluster=default">1</a>' in page
    units = admin_client.get("/admin/runtime/gpuunit/?cluster=default&phase__exact=Running")
    assert units.status_code == 200
    assert [u.name for u in units.context["cl"].result_list] == ["a"]
