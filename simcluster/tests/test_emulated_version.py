"""The emulated Kubernetes version, over HTTP with the official client: /version and the kubelets
say it, and a write keeps only the DRA fields of the gates that version has on, dropping the
others silently as the API server does: a 1.34 cluster loses consumable capacity, shared
counters and device taints, and serves no DeviceTaintRule; a 1.36 one keeps them all."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from simcluster.cluster import SimCluster
from simcluster.errors import ApiError
from simcluster.features import FeatureGates
from simcluster.store import Store
from simcluster.tests.test_shared_devices import Env, _example_gpu

VERSIONS = ("1.34", "1.35", "1.36")
TAINT = {"key": "example.com/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
TOLERATION = {"key": "example.com/unhealthy", "operator": "Exists"}


@pytest.fixture(scope="module")
def clusters() -> Iterator[dict[str, SimCluster]]:
    """One cluster per emulated version, each with one generated GPU node."""
    started: dict[str, SimCluster] = {}
    try:
        for version in VERSIONS:
            started[version] = SimCluster(
                topology={"generate": {"nodes": 1, "gpus_per_node": 1}}, emulated_version=version
            ).start()
        yield started
    finally:
        for cluster in started.values():
            cluster.stop()


def _api(cluster: SimCluster) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = cluster.url
    return client.ApiClient(configuration)


@pytest.fixture
def env_134(clusters: dict[str, SimCluster]) -> Iterator[Env]:
    """A namespace, node and device class of their own on the 1.34 cluster."""
    with _api(clusters["1.34"]) as api:
        made = Env(clusters["1.34"], api)
        yield made
        made.close()


def _wire(model: Any) -> dict[str, Any]:
    """A read model as the JSON the server sent (camelCase)."""
    return client.ApiClient().sanitize_for_serialization(model)


def _publish_partitioned_pool(api: client.ApiClient) -> tuple[str, str]:
    """A pool as a driver with every 1.36 DRA field publishes it: a counters-only slice, then a
    slice of one shareable, tainted device drawing on the counters. The slices' names."""
    resource = client.ResourceV1Api(api)
    tag = uuid.uuid4().hex[:8]
    driver, pool = f"{tag}.gpu.example.com", f"pool-{tag}"
    counters = {"memory": {"value": "80Gi"}}
    specs = [
        {"sharedCounters": [{"name": "gpu-0-counters", "counters": counters}]},
        {
            "devices": [
                _example_gpu(
                    0,
                    taints=[TAINT],
                    consumesCounters=[{"counterSet": "gpu-0-counters", "counters": counters}],
                )
            ]
        },
    ]
    names = []
    for number, spec in enumerate(specs):
        created = resource.create_resource_slice(
            {
                "metadata": {"name": f"{pool}-{number}"},
                "spec": {
                    "driver": driver,
                    "allNodes": True,
                    "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2},
                    **spec,
                },
            }
        )
        names.append(created.metadata.name)
    return names[0], names[1]


def _claim_spec() -> dict[str, Any]:
    """A claim spec with capacity requests and tolerations."""
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.example.com",
                        "capacity": {"requests": {"memory": "16Gi"}},
                        "tolerations": [TOLERATION],
                    },
                },
                {
                    "name": "either",
                    "firstAvailable": [
                        {
                            "name": "big",
                            "deviceClassName": "gpu.example.com",
                            "capacity": {"requests": {"memory": "40Gi"}},
                        }
                    ],
                },
            ]
        }
    }


def _create_claim_and_template(api: client.ApiClient) -> tuple[dict[str, Any], dict[str, Any]]:
    """A claim and a template of the same spec in a new namespace, as stored (wire form)."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    namespace = f"gates-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        resource.create_namespaced_resource_claim(
            namespace, {"metadata": {"name": "shared"}, "spec": _claim_spec()}
        )
        resource.create_namespaced_resource_claim_template(
            namespace, {"metadata": {"name": "per-pod"}, "spec": {"spec": _claim_spec()}}
        )
        claim = resource.read_namespaced_resource_claim("shared", namespace)
        template = resource.read_namespaced_resource_claim_template("per-pod", namespace)
        return _wire(claim)["spec"], _wire(template)["spec"]["spec"]
    finally:
        core.delete_namespace(namespace)


# -- /version and nodes --------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_version_and_kubelets_report_the_emulated_version_when_set(
    clusters: dict[str, SimCluster], version: str
) -> None:
    with _api(clusters[version]) as api:
        info = client.VersionApi(api).get_code()
        nodes = client.CoreV1Api(api).list_node().items

    minor = version.split(".")[1]
    assert (info.git_version, info.major, info.minor) == (f"v{version}.0-sim", "1", minor)
    assert (info.emulation_major, info.emulation_minor) == ("1", minor)
    assert [n.status.node_info.kubelet_version for n in nodes] == [f"v{version}.0"]


def test_the_default_cluster_is_1_36(sim: SimCluster) -> None:
    with urllib.request.urlopen(f"{sim.url}/version", timeout=10) as response:
        info = json.loads(response.read())

    assert (info["gitVersion"], info["minor"]) == ("v1.36.0-sim", "36")


def test_cli_emulates_the_version_its_flag_names(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "simcluster", "--port", "0", "--emulated-version", "1.34"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip().rsplit(" ", 1)[-1]
        with urllib.request.urlopen(f"{url}/version", timeout=10) as response:
            info = json.loads(response.read())
    finally:
        process.terminate()
        process.wait(timeout=20)

    assert (info["gitVersion"], info["minor"], info["minCompatibilityMinor"]) == (
        "v1.34.0-sim",
        "34",
        "33",
    )


def test_cli_refuses_a_gate_the_version_does_not_have() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "simcluster",
            "--emulated-version",
            "1.34",
            "--feature-gates",
            "DRADeviceTaintRules=true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode != 0
    assert "unrecognized feature gate: DRADeviceTaintRules" in result.stderr


# -- ResourceSlices ------------------------------------------------------------------------------


def _stored_partitioned_pool(cluster: SimCluster) -> tuple[dict, dict]:
    """Publish the partitioned pool, then read back its counters slice's spec and its first
    device as the cluster stored them."""
    with _api(cluster) as api:
        counters_name, devices_name = _publish_partitioned_pool(api)
        resource = client.ResourceV1Api(api)
        counters = _wire(resource.read_resource_slice(counters_name))["spec"]
        device = _wire(resource.read_resource_slice(devices_name))["spec"]["devices"][0]
    return counters, device


def test_slice_loses_counters_shared_allocation_and_taints_when_1_34(
    clusters: dict[str, SimCluster],
) -> None:
    counters, device = _stored_partitioned_pool(clusters["1.34"])

    assert "sharedCounters" not in counters
    assert not {"allowMultipleAllocations", "consumesCounters", "taints"} & set(device)
    # The capacities stay, without their request policies.
    assert device["capacity"] == {"memory": {"value": "80Gi"}, "compute": {"value": "100"}}
    assert device["attributes"]["model"] == {"string": "LATEST-GPU-MODEL"}


def test_slice_keeps_counters_shared_allocation_and_taints_when_1_36(
    clusters: dict[str, SimCluster],
) -> None:
    counters, device = _stored_partitioned_pool(clusters["1.36"])

    assert counters["sharedCounters"][0]["name"] == "gpu-0-counters"
    assert device["allowMultipleAllocations"] is True
    assert device["consumesCounters"][0]["counterSet"] == "gpu-0-counters"
    assert device["taints"][0]["key"] == TAINT["key"]
    assert device["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "1Gi"


def test_a_slice_update_adding_gated_fields_drops_them_when_1_34(
    clusters: dict[str, SimCluster],
) -> None:
    with _api(clusters["1.34"]) as api:
        resource = client.ResourceV1Api(api)
        _counters_name, devices_name = _publish_partitioned_pool(api)
        stored = _wire(resource.read_resource_slice(devices_name))
        stored["spec"]["devices"][0]["allowMultipleAllocations"] = True
        stored["spec"]["devices"][0]["taints"] = [TAINT]
        resource.replace_resource_slice(devices_name, stored)
        device = _wire(resource.read_resource_slice(devices_name))["spec"]["devices"][0]

    assert not {"allowMultipleAllocations", "taints"} & set(device)


# -- ResourceClaims and templates ----------------------------------------------------------------


def test_claim_and_template_lose_capacity_requests_and_tolerations_when_1_34(
    clusters: dict[str, SimCluster],
) -> None:
    with _api(clusters["1.34"]) as api:
        claim, template = _create_claim_and_template(api)

    for spec in (claim, template):
        gpu, either = spec["devices"]["requests"]
        assert gpu["exactly"] == {
            "deviceClassName": "gpu.example.com",
            "allocationMode": "ExactCount",
            "count": 1,
        }
        # firstAvailable itself is beta and on in 1.34; only its capacity request goes.
        assert "capacity" not in either["firstAvailable"][0]


def test_claim_and_template_keep_capacity_requests_and_tolerations_when_1_36(
    clusters: dict[str, SimCluster],
) -> None:
    with _api(clusters["1.36"]) as api:
        claim, template = _create_claim_and_template(api)

    for spec in (claim, template):
        gpu, either = spec["devices"]["requests"]
        assert gpu["exactly"]["capacity"] == {"requests": {"memory": "16Gi"}}
        assert gpu["exactly"]["tolerations"] == [TOLERATION]
        assert either["firstAvailable"][0]["capacity"] == {"requests": {"memory": "40Gi"}}


def test_a_gpu_that_allows_multiple_allocations_is_held_whole_when_1_34(env_134: Env) -> None:
    """dra-example-driver's shareable GPU on a 1.34 cluster: without DRAConsumableCapacity the
    device is exclusive, so of two claims asking a share the second waits."""
    env_134.publish({"devices": [_example_gpu(0)]})
    share = {"capacity": {"requests": {"memory": "16Gi", "compute": "20"}}}
    for number in (0, 1):
        env_134.claim(f"share-{number}", [{"name": "gpu", "exactly": dict(share)}])
    env_134.pod("first", "share-0")
    env_134.running("first")
    env_134.pod("second", "share-1")

    message = env_134.unschedulable("second")
    [result] = env_134.results("share-0")
    assert "cannot allocate all claims" in message
    assert result["device"] == "gpu-0"
    assert not {"shareID", "consumedCapacity"} & set(result)


# -- DeviceTaintRule -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "gates", "served"),
    [
        ("1.34", None, False),
        ("1.35", None, False),
        # Beta and still off by default in 1.36 (k8s PR #137170).
        ("1.36", None, False),
        ("1.36", {"DRADeviceTaintRules": True}, True),
    ],
)
def test_device_taint_rules_are_served_only_when_their_gate_is_on(
    clusters: dict[str, SimCluster], version: str, gates: dict | None, served: bool
) -> None:
    cluster = clusters[version]
    if gates:
        cluster = SimCluster(
            topology={"generate": {"nodes": 1, "gpus_per_node": 1}},
            emulated_version=version,
            feature_gates=gates,
        ).start()
    try:
        with _api(cluster) as api:
            group = client.ApisApi(api).get_api_versions()
            try:
                client.ResourceV1alpha3Api(api).list_device_taint_rule()
                status = 200
            except ApiException as error:
                status = error.status
    finally:
        if gates:
            cluster.stop()

    resource_group = next(g for g in group.groups if g.name == "resource.k8s.io")
    versions = {v.version for v in resource_group.versions}
    assert status == (200 if served else 404)
    assert ("v1alpha3" in versions) is served
    assert resource_group.preferred_version.version == "v1"


def test_taint_device_hook_is_refused_where_rules_are_not_served(
    clusters: dict[str, SimCluster],
) -> None:
    cluster = clusters["1.34"]

    with pytest.raises(ApiError, match="could not find the requested resource"):
        cluster.taint_device("gpu.nvidia.com", "gpu-node-0", "gpu-0")


# -- gates and restores (store level) ------------------------------------------------------------


def _slice_with_counters() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "counters"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "set", "counters": {"memory": {"value": "1Gi"}}}],
        },
    }


def test_a_gate_turned_on_keeps_its_fields_when_1_34() -> None:
    store = Store(features=FeatureGates("1.34", {"DRAPartitionableDevices": True}))

    stored = store.create("resourceslices", _slice_with_counters())

    assert stored["spec"]["sharedCounters"][0]["name"] == "set"


def test_a_restore_drops_what_the_version_would_have_when_1_34() -> None:
    newer = Store(features=FeatureGates("1.36"))
    newer.create("resourceslices", _slice_with_counters())
    older = Store(features=FeatureGates("1.34"))

    older.load(newer.dump())

    restored = older.get("resourceslices", None, "counters")
    assert restored is not None
    assert "sharedCounters" not in restored["spec"]


def test_an_unknown_version_or_gate_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unsupported Kubernetes version '1\.33'"):
        FeatureGates("1.33")
    with pytest.raises(ValueError, match="unrecognized feature gate: DRANoSuchGate"):
        FeatureGates("1.36", {"DRANoSuchGate": True})
