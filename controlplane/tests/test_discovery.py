"""DeviceTaintRule is read at the version the cluster serves it: v1beta2 on 1.36 (which need
not serve the alpha v1alpha3 at all), v1alpha3 on 1.34-1.35, and none where the gate is off."""

from __future__ import annotations

import pytest

from controlplane import kube
from inventory.sync import fetch
from simcluster.cluster import SimCluster


@pytest.fixture
def cluster_at(tmp_path, settings):
    started: list[SimCluster] = []

    def start(version: str, gates: dict[str, bool] | None = None) -> SimCluster:
        cluster = SimCluster(
            topology={"generate": {"nodes": 1, "gpus_per_node": 1}},
            emulated_version=version,
            feature_gates=gates,
            scheduler=False,
        ).start()
        started.append(cluster)
        settings.KUBECONFIG = str(cluster.write_kubeconfig(tmp_path / f"kubeconfig-{version}"))
        kube.reset()
        return cluster

    yield start
    for cluster in started:
        cluster.stop()
    kube.reset()


def rule(name: str, kind: kube.Kind) -> dict:
    return {
        "apiVersion": kind.api_version,
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com"},
            "taint": {"key": "example.com/drain", "effect": "NoSchedule"},
        },
    }


@pytest.mark.parametrize(
    ("version", "gates", "served_at"),
    [
        ("1.36", {"DRADeviceTaintRules": True}, "v1beta2"),
        ("1.35", {"DRADeviceTaints": True, "DRADeviceTaintRules": True}, "v1alpha3"),
    ],
)
def test_rules_are_read_at_the_newest_version_served(cluster_at, version, gates, served_at):
    cluster_at(version, gates)
    kind = kube.device_taint_rule_kind()
    assert kind.version == served_at
    kube.create(kind, None, rule("drain", kind))
    assert [r["metadata"]["name"] for r in kube.list_objects(kind)] == ["drain"]
    assert [r["metadata"]["name"] for r in fetch()["device_taint_rules"]] == ["drain"]


def test_a_cluster_serving_no_rules_has_none(cluster_at):
    cluster_at("1.36")  # DRADeviceTaintRules off by default, as in a real 1.36
    assert fetch()["device_taint_rules"] == []
