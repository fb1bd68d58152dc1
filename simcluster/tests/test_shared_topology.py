"""The shared-and-MIG topology (topologies/shared-mig.yaml) seeds slices the allocator shares
and partitions as a 1.36 cluster would: quarter shares pack one HAMi GPU, MIG devices of one
parent are found together."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from simcluster.cluster import SimCluster
from simcluster.tests.conftest import wait_until

TOPOLOGY = Path(__file__).parents[1] / "topologies" / "shared-mig.yaml"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.ApiClient]:
    cluster = SimCluster(topology=TOPOLOGY)
    cluster.start()
    kubeconfig = cluster.write_kubeconfig(tmp_path_factory.mktemp("shared") / "config")
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api_client:
        yield api_client
    cluster.stop()


def _run(api: client.ApiClient, name: str, requests: list[dict[str, Any]], **devices: Any) -> Any:
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    resource.create_namespaced_resource_claim(
        "default",
        {"metadata": {"name": name}, "spec": {"devices": {"requests": requests, **devices}}},
    )
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "containers": [{"name": "main", "image": "busybox:1.36"}],
            },
        },
    )
    wait_until(
        lambda: core.read_namespaced_pod(name, "default"),
        lambda p: p.status.phase == "Running",
        f"pod {name} Running",
    )
    claim = resource.read_namespaced_resource_claim(name, "default")
    return client.ApiClient().sanitize_for_serialization(claim)["status"]["allocation"]


def test_quarter_shares_pack_one_hami_gpu(api: client.ApiClient) -> None:
    quarter = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "hami-core-gpu.project-hami.io",
            "capacity": {"requests": {"cores": "25", "memory": "20Gi"}},
        },
    }
    placed = [_run(api, f"quarter-{n}", [quarter])["devices"]["results"][0] for n in range(5)]
    assert [r["device"] for r in placed] == ["hami-gpu-0"] * 4 + ["hami-gpu-1"]
    assert placed[0]["consumedCapacity"] == {"cores": "25", "memory": "20Gi"}
    assert {r["pool"] for r in placed} == {"gpu-node-shared-0"}


def test_mig_pair_lands_on_one_parent(api: client.ApiClient) -> None:
    def profile(name: str) -> dict[str, Any]:
        expression = f"device.attributes['gpu.nvidia.com'].profile == '{name}'"
        return {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": expression}}],
        }

    allocation = _run(
        api,
        "mig-pair",
        [
            {"name": "small", "exactly": profile("1g.10gb")},
            {"name": "large", "exactly": profile("3g.40gb")},
        ],
        constraints=[{"matchAttribute": "gpu.nvidia.com/parentUUID"}],
    )
    devices = {r["request"]: r["device"] for r in allocation["devices"]["results"]}
    assert devices == {"small": "gpu-0-mig-1g-0", "large": "gpu-0-mig-3g-3"}
