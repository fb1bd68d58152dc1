"""`manage.py import_clusters`: ClusterProfiles become Cluster rows, all or nothing."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command

from inventory.models import Cluster

pytestmark = pytest.mark.django_db

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "clusterprofiles.yaml"
SAMPLE_NAMES = ["eu-west", "us-east"]


def profile(
    name: str,
    *,
    properties: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    display_name: str = "",
    kind: str = "ClusterProfile",
    api_version: str = "multicluster.x-k8s.io/v1alpha1",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "fleet-system"}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": metadata,
        "spec": {"displayName": display_name, "clusterManager": {"name": "fleet-manager"}},
        "status": {
            "properties": [{"name": k, "value": v} for k, v in (properties or {}).items()],
        },
    }


def write(tmp_path: Path, *objects: dict[str, Any]) -> str:
    path = tmp_path / "profiles.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("import_clusters", *args, stdout=out)
    return out.getvalue()


def run_failing(*args: str) -> str:
    out = io.StringIO()
    with pytest.raises(CommandError, match="nothing written"):
        call_command("import_clusters", *args, stdout=out)
    return out.getvalue()


def imported() -> dict[str, Cluster]:
    """The rows the tests import: `migrate` registers the stand-in "default" cluster too."""
    return {c.name: c for c in Cluster.objects.exclude(name="default")}


def test_sample_creates_both_clusters_disabled_when_imported():
    out = run(str(SAMPLE))
    assert "created us-east (region us-east)" in out
    assert "created eu-west (region eu-west)" in out
    assert "2 created, 0 updated, 0 unchanged" in out
    rows = imported()
    assert sorted(rows) == SAMPLE_NAMES
    us_east, eu_west = rows["us-east"], rows["eu-west"]
    assert not us_east.enabled
    assert not eu_west.enabled
    assert us_east.display_name == "US East (Virginia)"
    assert us_east.properties["clusterset.k8s.io"] == "gpu-fleet"
    assert us_east.properties["region"] == "us-east"
    assert us_east.pod_cidrs == ["10.64.0.0/14"]
    assert us_east.service_cidrs == ["10.68.0.0/16"]
    assert us_east.node_cidrs == ["192.168.16.0/20"]
    assert us_east.kubeconfig == ""
    assert eu_west.region == "eu-west"  # from the topology label
    assert eu_west.pod_cidrs == ["10.72.0.0/14", "fd00:72::/48"]
    assert eu_west.node_cidrs == []
    assert eu_west.kubeconfig == "eu-west.yaml"  # the annotation's file name
    assert Cluster.objects.get(name="default").enabled


def test_reimport_updates_profile_fields_and_keeps_operations_fields_when_row_exists(tmp_path):
    run(str(SAMPLE))
    Cluster.objects.filter(name="default").update(enabled=False)
    Cluster.objects.filter(name="us-east").update(
        enabled=True, cordoned=True, position=7, kube_context="admin@us-east"
    )
    changed = yaml.safe_load_all(SAMPLE.read_text())
    us_east, eu_west = (doc for doc in changed if doc)
    us_east["spec"]["displayName"] = "US East"
    us_east["status"]["properties"][1]["value"] = "us-east-2"
    out = run(write(tmp_path, us_east, eu_west))
    assert "updated us-east (display_name, region, properties)" in out
    assert "unchanged eu-west" in out
    assert "0 created, 1 updated, 1 unchanged" in out
    row = Cluster.objects.get(name="us-east")
    assert (row.display_name, row.region) == ("US East", "us-east-2")
    assert row.properties["region"] == "us-east-2"
    assert (row.enabled, row.cordoned, row.position) == (True, True, 7)
    assert row.kube_context == "admin@us-east"
    assert row.pod_cidrs == ["10.64.0.0/14"]


def test_reimport_keeps_the_kubeconfig_when_the_profile_names_none(tmp_path):
    Cluster.objects.create(
        name="us-east", region="us-east", enabled=False, kubeconfig="us-east.yaml"
    )
    out = run(write(tmp_path, profile("us-east", properties={"region": "us-east"})))
    assert "updated us-east (properties)" in out
    assert Cluster.objects.get(name="us-east").kubeconfig == "us-east.yaml"


@pytest.mark.parametrize(
    ("properties", "labels", "args", "region"),
    [
        ({"region": "us-east"}, {}, [], "us-east"),
        ({"topology.kubernetes.io/region": "us-west"}, {}, [], "us-west"),
        ({"location": "apac"}, {}, [], "apac"),
        ({}, {"topology.kubernetes.io/region": "eu-north"}, [], "eu-north"),
        ({}, {}, ["--region", "on-prem"], "on-prem"),
        (
            {"location": "apac", "topology.kubernetes.io/region": "us-west", "region": "us-east"},
            {"topology.kubernetes.io/region": "eu-north"},
            ["--region", "on-prem"],
            "us-east",
        ),
        ({"location": "apac"}, {"topology.kubernetes.io/region": "eu-north"}, [], "apac"),
        ({}, {"topology.kubernetes.io/region": "eu-north"}, ["--region", "on-prem"], "eu-north"),
    ],
    ids=[
        "region-property",
        "topology-property",
        "location-property",
        "label",
        "option",
        "region-property-first",
        "property-before-label",
        "label-before-option",
    ],
)
def test_region_is_taken_from_the_first_source_when_several_name_one(
    tmp_path, properties, labels, args, region
):
    out = run(write(tmp_path, profile("gpu-a", properties=properties, labels=labels)), *args)
    assert f"created gpu-a (region {region})" in out
    assert Cluster.objects.get(name="gpu-a").region == region


def test_dry_run_prints_the_plan_and_writes_nothing_when_asked(tmp_path):
    out = run(str(SAMPLE), "--dry-run")
    assert "created us-east (region us-east)" in out
    assert "created eu-west (region eu-west)" in out
    assert "(dry run: nothing written)" in out
    assert imported() == {}

    run(str(SAMPLE))
    renamed = profile("us-east", display_name="Renamed", properties={"region": "us-east"})
    out = run(write(tmp_path, renamed), "--dry-run")
    assert "updated us-east (display_name, properties, pod_cidrs, service_cidrs, node_cidrs)" in out
    assert Cluster.objects.get(name="us-east").display_name == "US East (Virginia)"


@pytest.mark.parametrize(
    ("bad", "line"),
    [
        (
            profile("US_East", properties={"region": "us-east"}),
            'error US_East: metadata.name: "US_East" is not a DNS-1123 label',
        ),
        (
            profile("us-east.prod", properties={"region": "us-east"}),
            'error us-east.prod: metadata.name: "us-east.prod" is not a DNS-1123 label',
        ),
        (profile("no-region"), "error no-region: no region: none of the properties"),
        (
            profile("bad-region", properties={"region": "US East"}),
            'error bad-region: region: "US East" is not a DNS-1123 label',
        ),
        (
            profile("bad-cidr", properties={"region": "us-east", "pod-cidrs": "10.0.0.0/8, x"}),
            'error bad-cidr: pod_cidrs: Item 2 in the array did not validate: "x" is not a '
            "network in CIDR notation",
        ),
        (
            profile("gpu-a", kind="Deployment", api_version="apps/v1"),
            "error gpu-a: kind Deployment (apps/v1) is not a ClusterProfile",
        ),
        (
            profile("gpu-a", api_version="multicluster.x-k8s.io/v1beta1"),
            "error gpu-a: kind ClusterProfile (multicluster.x-k8s.io/v1beta1) is not a "
            "ClusterProfile (multicluster.x-k8s.io/v1alpha1)",
        ),
        (
            profile(
                "gpu-a",
                properties={"region": "us-east"},
                annotations={"gpu.lokiwager.io/kubeconfig": "/etc/shadow"},
            ),
            "error gpu-a: annotation gpu.lokiwager.io/kubeconfig: '/etc/shadow' is not a file "
            "name in CLUSTER_CREDENTIALS_DIR",
        ),
        (
            profile(
                "gpu-a",
                properties={"region": "us-east"},
                annotations={"gpu.lokiwager.io/kubeconfig": "../kubeconfig"},
            ),
            "error gpu-a: annotation gpu.lokiwager.io/kubeconfig: '../kubeconfig' is not a file "
            "name in CLUSTER_CREDENTIALS_DIR",
        ),
        (profile("us-east", properties={"region": "us-east"}), "error us-east: the input names"),
    ],
    ids=[
        "bad-name",
        "subdomain-name",
        "no-region",
        "bad-region",
        "bad-cidr",
        "wrong-kind",
        "wrong-api-version",
        "kubeconfig-path",
        "kubeconfig-parent",
        "duplicate",
    ],
)
def test_nothing_is_written_when_any_object_has_an_error(tmp_path, bad, line):
    good = yaml.safe_load_all(SAMPLE.read_text())
    out = run_failing(write(tmp_path, *(doc for doc in good if doc), bad))
    assert line in out
    assert "created us-east (region us-east)" in out
    assert imported() == {}


def test_an_update_is_rolled_back_when_another_object_has_an_error(tmp_path):
    run(str(SAMPLE))
    renamed = profile("us-east", display_name="Renamed", properties={"region": "us-east"})
    out = run_failing(write(tmp_path, renamed, profile("no-region")))
    assert "updated us-east" in out
    assert "error no-region: no region" in out
    assert Cluster.objects.get(name="us-east").display_name == "US East (Virginia)"


def test_each_cluster_gets_its_file_when_the_credentials_dir_has_one(tmp_path, settings):
    settings.CLUSTER_CREDENTIALS_DIR = str(tmp_path)
    (tmp_path / "kubeconfig-us-east").write_text("apiVersion: v1\nkind: Config\n")
    (tmp_path / "kubeconfig-eu-west").write_text("apiVersion: v1\nkind: Config\n")
    run(str(SAMPLE))
    rows = imported()
    assert rows["us-east"].kubeconfig == "kubeconfig-us-east"
    # The annotation names eu-west's file, over the directory's kubeconfig-eu-west.
    assert rows["eu-west"].kubeconfig == "eu-west.yaml"


def test_kubeconfig_stays_empty_when_the_directory_has_no_file_for_the_cluster(tmp_path, settings):
    settings.CLUSTER_CREDENTIALS_DIR = str(tmp_path)
    source = write(tmp_path, profile("gpu-a", properties={"region": "r1"}))
    run(source)
    assert Cluster.objects.get(name="gpu-a").kubeconfig == ""


def test_stdin_list_is_imported_when_the_file_is_a_dash(monkeypatch):
    listed = {
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ClusterProfileList",
        "items": [
            profile("gpu-a", properties={"region": "r1"}),
            profile("gpu-b", labels={"topology.kubernetes.io/region": "r2"}),
        ],
    }
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(listed)))
    out = run("-")
    assert "created gpu-a (region r1)" in out
    assert "created gpu-b (region r2)" in out
    assert sorted(imported()) == ["gpu-a", "gpu-b"]


def test_single_object_is_imported_when_the_input_is_not_a_list(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(profile("gpu-a"))))
    run("-", "--region", "r1")
    assert Cluster.objects.get(name="gpu-a").region == "r1"


def test_enable_enables_a_new_cluster_beside_the_enabled_ones(tmp_path):
    run(write(tmp_path, profile("gpu-a", properties={"region": "r1"})), "--enable")
    assert Cluster.objects.get(name="gpu-a").enabled
    assert Cluster.objects.get(name="default").enabled


def test_enable_is_refused_when_the_input_has_several_profiles():
    with pytest.raises(CommandError, match="--enable takes one ClusterProfile; the input has 2"):
        call_command("import_clusters", str(SAMPLE), "--enable", stdout=io.StringIO())
    assert imported() == {}


def test_missing_file_is_an_error():
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_clusters", "/nonexistent/profiles.yaml", stdout=io.StringIO())
