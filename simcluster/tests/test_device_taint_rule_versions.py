"""DeviceTaintRule at the versions each emulated version serves, over HTTP with the official
client and kubectl: v1alpha3 in 1.34 (no status) and 1.35 (with status), v1alpha3 and v1beta2 in
1.36 (k8s PR #137170), one object seen through either, in discovery as the real server lists
it. Each cluster has the gates the kind needs turned on (DRADeviceTaints, and DRADeviceTaintRules
in 1.35), as a cluster serving it must."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from simcluster.cluster import SimCluster
from simcluster.tests.conftest import TINY_TOPOLOGY
from simcluster.validation import schemas_for

GATES = {
    "1.34": {"DRADeviceTaints": True},
    "1.35": {"DRADeviceTaints": True, "DRADeviceTaintRules": True},
    # Off by default in 1.36 as well (k8s PR #137170): turned on, as a cluster using them is.
    "1.36": {"DRADeviceTaintRules": True},
}
SERVED = {"1.34": ["v1alpha3"], "1.35": ["v1alpha3"], "1.36": ["v1beta2", "v1alpha3"]}


@pytest.fixture(scope="module")
def clusters() -> Iterator[dict[str, SimCluster]]:
    started: dict[str, SimCluster] = {}
    try:
        for version, gates in GATES.items():
            started[version] = SimCluster(
                topology=TINY_TOPOLOGY, emulated_version=version, feature_gates=gates
            ).start()
        yield started
    finally:
        for cluster in started.values():
            cluster.stop()


@pytest.fixture
def api_136(clusters: dict[str, SimCluster]) -> Iterator[client.ApiClient]:
    configuration = client.Configuration()
    configuration.host = clusters["1.36"].url
    with client.ApiClient(configuration) as api:
        yield api


def _get(cluster: SimCluster, path: str, accept: str = "application/json") -> Any:
    request = urllib.request.Request(cluster.url + path, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _rule(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"},
            "taint": {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"},
        },
    }


# -- discovery -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
def test_discovery_lists_the_versions_and_status_the_version_serves(
    clusters: dict[str, SimCluster], version: str
) -> None:
    cluster = clusters[version]
    group = _get(cluster, "/apis/resource.k8s.io")
    lists = {
        v: {r["name"] for r in _get(cluster, f"/apis/resource.k8s.io/{v}")["resources"]}
        for v in SERVED[version]
    }
    aggregated = _get(
        cluster,
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    )
    resource_group = next(
        g for g in aggregated["items"] if g["metadata"]["name"] == "resource.k8s.io"
    )
    rules_in = {
        entry["version"]: next(
            (r for r in entry["resources"] if r["resource"] == "devicetaintrules"), None
        )
        for entry in resource_group["versions"]
    }

    assert [v["version"] for v in group["versions"]] == ["v1", *SERVED[version]]
    assert group["preferredVersion"]["version"] == "v1"
    with_status = version != "1.34"
    for served in SERVED[version]:
        assert "devicetaintrules" in lists[served]
        assert ("devicetaintrules/status" in lists[served]) is with_status
        entry = rules_in[served]
        assert entry is not None
        assert entry["responseKind"] == {
            "group": "resource.k8s.io",
            "version": served,
            "kind": "DeviceTaintRule",
        }
        assert bool(entry.get("subresources")) is with_status
    assert rules_in["v1"] is None


# -- one object, two versions ----------------------------------------------------------------


def test_a_rule_made_at_v1alpha3_is_read_patched_and_deleted_at_v1beta2(
    api_136: client.ApiClient,
) -> None:
    alpha, beta = client.ResourceV1alpha3Api(api_136), client.ResourceV1beta2Api(api_136)
    name = f"both-{uuid.uuid4().hex[:8]}"

    created = alpha.create_device_taint_rule(_rule(name))
    read = beta.read_device_taint_rule(name)
    listed = {r.metadata.name: r for r in beta.list_device_taint_rule().items}
    patched = beta.patch_device_taint_rule(name, {"spec": {"taint": {"effect": "NoExecute"}}})
    again = alpha.read_device_taint_rule(name)
    beta.delete_device_taint_rule(name)

    assert created.api_version == "resource.k8s.io/v1alpha3"
    assert read.api_version == "resource.k8s.io/v1beta2"
    assert read.metadata.uid == created.metadata.uid
    assert read.spec.device_selector.device == "gpu-0"
    assert read.spec.taint.time_added == created.spec.taint.time_added
    assert listed[name].api_version == "resource.k8s.io/v1beta2"
    assert (patched.api_version, patched.spec.taint.effect) == (
        "resource.k8s.io/v1beta2",
        "NoExecute",
    )
    assert (again.api_version, again.spec.taint.effect) == ("resource.k8s.io/v1alpha3", "NoExecute")
    assert name not in {r.metadata.name for r in alpha.list_device_taint_rule().items}
    # What makes renaming apiVersion a lossless conversion: the two have the same fields.
    schemas = schemas_for("1.36")
    for kind in (
        "DeviceTaintRuleSpec",
        "DeviceTaintSelector",
        "DeviceTaint",
        "DeviceTaintRuleStatus",
    ):
        alpha_schema = schemas.definition(f"io.k8s.api.resource.v1alpha3.{kind}")
        beta_schema = schemas.definition(f"io.k8s.api.resource.v1beta2.{kind}")
        assert sorted(alpha_schema["properties"]) == sorted(beta_schema["properties"]), kind


def test_a_watch_at_v1beta2_sees_a_rule_made_at_v1alpha3(api_136: client.ApiClient) -> None:
    alpha, beta = client.ResourceV1alpha3Api(api_136), client.ResourceV1beta2Api(api_136)
    name = f"watched-{uuid.uuid4().hex[:8]}"
    version = beta.list_device_taint_rule().metadata.resource_version
    alpha.create_device_taint_rule(_rule(name))
    try:
        stream = watch.Watch().stream(
            beta.list_device_taint_rule, resource_version=version, timeout_seconds=5
        )
        event = next(e for e in stream if e["object"].metadata.name == name)
    finally:
        alpha.delete_device_taint_rule(name)

    assert event["type"] == "ADDED"
    assert event["object"].api_version == "resource.k8s.io/v1beta2"
    assert event["object"].spec.taint.key == "example.com/maintenance"


def test_status_is_written_through_its_subresource_when_1_36(
    api_136: client.ApiClient,
) -> None:
    beta = client.ResourceV1beta2Api(api_136)
    name = f"status-{uuid.uuid4().hex[:8]}"
    condition = {
        "type": "EvictionInProgress",
        "status": "False",
        "reason": "NoEffect",
        "message": "no pods to evict",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    body = _rule(name)
    body["status"] = {"conditions": [condition]}
    created = beta.create_device_taint_rule(body)
    try:
        with_status = beta.replace_device_taint_rule_status(
            name, {**_rule(name), "status": {"conditions": [condition]}}
        )
        spec_only = beta.patch_device_taint_rule(name, {"status": {"conditions": []}})
        read = client.ResourceV1alpha3Api(api_136).read_device_taint_rule_status(name)
    finally:
        beta.delete_device_taint_rule(name)

    assert created.status is None
    assert with_status.status.conditions[0].type == "EvictionInProgress"
    assert spec_only.status.conditions[0].reason == "NoEffect"
    assert read.status.conditions[0].message == "no pods to evict"


# -- kubectl -----------------------------------------------------------------------------------


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_applies_a_v1alpha3_rule_and_reads_it_at_v1beta2_when_1_36(
    clusters: dict[str, SimCluster], tmp_path: Path
) -> None:
    cluster = clusters["1.36"]
    kubeconfig = cluster.write_kubeconfig(tmp_path / "config")
    name = f"kc-{uuid.uuid4().hex[:8]}"
    manifest = tmp_path / "rule.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule", **_rule(name)}
        )
    )

    def kubectl(*args: str) -> str:
        result = subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                str(kubeconfig),
                "--cache-dir",
                str(tmp_path / "cache"),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin:/usr/local/bin"},
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    created = kubectl("apply", "-f", str(manifest))
    shown = yaml.safe_load(kubectl("get", "devicetaintrule", name, "-o", "yaml"))
    pinned = yaml.safe_load(
        kubectl("get", "devicetaintrules.v1alpha3.resource.k8s.io", name, "-o", "yaml")
    )
    again = kubectl("apply", "-f", str(manifest))
    deleted = kubectl("delete", "-f", str(manifest))

    assert created.strip() == f"devicetaintrule.resource.k8s.io/{name} created"
    assert shown["apiVersion"] == "resource.k8s.io/v1beta2"
    assert pinned["apiVersion"] == "resource.k8s.io/v1alpha3"
    assert shown["spec"] == pinned["spec"]
    assert again.strip() == f"devicetaintrule.resource.k8s.io/{name} unchanged"
    assert deleted.strip() == f'devicetaintrule.resource.k8s.io "{name}" deleted'
