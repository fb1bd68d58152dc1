"""DeviceTaintRule is read at the version the cluster serves it: v1beta2 on 1.36 (which need
not serve the alpha v1alpha3 at all), v1alpha3 where only that is served (1.34-1.35), and none
where the API is off. The development clusters run 1.36; what they serve is set with the API
server's --runtime-config, as an operator would."""

from __future__ import annotations

import pytest

from controlplane import kube
from devstack.cluster import DevCluster
from inventory.sync import fetch

BETA = "resource.k8s.io/v1beta2"
ALPHA = "resource.k8s.io/v1alpha3"


@pytest.fixture
def cluster_serving(tmp_path, settings):
    """Start a one-GPU development cluster whose API server serves the group versions given
    (`--runtime-config`), with these feature gates, and point the product at it."""
    started: list[DevCluster] = []

    def start(runtime_config: dict[str, str], gates: dict[str, bool] | None = None) -> DevCluster:
        cluster = DevCluster(
            tmp_path / f"cluster-{len(started)}",
            topology={"generate": {"nodes": 1, "gpus_per_node": 1}},
            feature_gates=gates,
            runtime_config=runtime_config,
        )
        started.append(cluster)
        cluster.start()
        settings.KUBECONFIG = str(cluster.write_kubeconfig(tmp_path / f"kubeconfig-{len(started)}"))
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
    ("runtime_config", "served_at"),
    [
        ({BETA: "true"}, "v1beta2"),  # 1.36 with the beta API on
        ({BETA: "false", ALPHA: "true"}, "v1alpha3"),  # as 1.34-1.35 serve it
        ({BETA: "true", ALPHA: "true"}, "v1beta2"),  # both: the newer
    ],
)
def test_rules_are_read_at_the_newest_version_served(cluster_serving, runtime_config, served_at):
    cluster_serving(runtime_config)
    kind = kube.device_taint_rule_kind()
    assert kind.version == served_at
    kube.create(kind, None, rule("drain", kind))
    assert [r["metadata"]["name"] for r in kube.list_objects(kind)] == ["drain"]
    assert [r["metadata"]["name"] for r in fetch()["device_taint_rules"]] == ["drain"]


def test_a_cluster_serving_no_rules_has_none(cluster_serving):
    # A real 1.36 by default: the gate off and resource.k8s.io/v1beta2 not served.
    cluster_serving({BETA: "false"}, {"DRADeviceTaintRules": False})
    kind = kube.device_taint_rule_kind()
    with pytest.raises(kube.KubeError) as refused:
        kube.create(kind, None, rule("drain", kind))
    assert refused.value.status == 404
    assert fetch()["device_taint_rules"] == []
