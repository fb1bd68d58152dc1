"""kubectl against the simulated cluster, each test with its own HOME and cache folder."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
import yaml

from simcluster.cluster import SimCluster
from simcluster.tests.conftest import Kubectl

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]

GPUUNIT_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gpuunits.runtime.lokiwager.io
spec:
  group: runtime.lokiwager.io
  scope: Namespaced
  names: {plural: gpuunits, singular: gpuunit, kind: GPUUnit, listKind: GPUUnitList}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Phase, type: string, jsonPath: .status.phase}
    - {name: Package, type: string, jsonPath: .spec.packageID}
    - {name: GPU, type: integer, jsonPath: .spec.gpu}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [packageID, gpu]
            properties:
              packageID: {type: string}
              gpu: {type: integer, minimum: 1}
              image: {type: string}
          status:
            type: object
            properties:
              phase: {type: string}
"""


@pytest.fixture
def namespace(sim: SimCluster) -> str:
    name = f"kc-{uuid.uuid4().hex[:8]}"
    sim.store.create("namespaces", {"metadata": {"name": name}})
    return name


def _manifest(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _table(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines() if line.strip()]


def test_get_nodes_deviceclasses_resourceslices(sim: SimCluster, kubectl: Kubectl) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    # Created in the session's cluster, and removed again: a Ready node there would take the
    # plain pods other modules expect to stay Pending.
    try:
        sim.store.create(
            "nodes",
            {
                "metadata": {"name": node},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
            internal=True,
        )
        sim.store.create(
            "deviceclasses",
            {"metadata": {"name": f"{node}.example.com"}, "spec": {}},
            internal=True,
        )
        sim.store.create(
            "resourceslices",
            {
                "metadata": {"name": f"{node}-gpu.nvidia.com"},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                },
            },
            internal=True,
        )

        output = kubectl("get", "nodes,deviceclasses,resourceslices").stdout

        assert f"node/{node}" in output
        assert f"deviceclass.resource.k8s.io/{node}.example.com" in output
        rows = _table(output)
        assert ["NAME", "NODE", "DRIVER", "POOL", "AGE"] in rows
        assert any(
            row[:4]
            == [
                f"resourceslice.resource.k8s.io/{node}-gpu.nvidia.com",
                node,
                "gpu.nvidia.com",
                node,
            ]
            for row in rows
        )
        assert any(row[:2] == [f"node/{node}", "Ready"] for row in rows)
    finally:
        sim.store.delete("resourceslices", None, f"{node}-gpu.nvidia.com", internal=True)
        sim.store.delete("deviceclasses", None, f"{node}.example.com", internal=True)
        sim.store.delete("nodes", None, node, internal=True)


def test_apply_crd_then_custom_object_shows_printer_columns(
    kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    unit = (
        "apiVersion: runtime.lokiwager.io/v1alpha1\nkind: GPUUnit\n"
        f"metadata: {{name: unit-1, namespace: {namespace}}}\n"
        "spec: {packageID: h200-x2, gpu: 2, image: busybox}\n"
    )

    crd_output = kubectl("apply", "-f", _manifest(tmp_path, "crd.yaml", GPUUNIT_CRD)).stdout
    unit_output = kubectl("apply", "-f", _manifest(tmp_path, "unit.yaml", unit)).stdout
    listing = kubectl("get", "gpuunits", "-n", namespace).stdout

    assert (
        "customresourcedefinition.apiextensions.k8s.io/gpuunits.runtime.lokiwager.io" in crd_output
    )
    assert unit_output.strip() == "gpuunit.runtime.lokiwager.io/unit-1 created"
    rows = _table(listing)
    assert rows[0] == ["NAME", "PHASE", "PACKAGE", "GPU", "AGE"]
    assert rows[1][:3] == ["unit-1", "h200-x2", "2"]  # empty PHASE prints as blank


def test_apply_refuses_object_violating_crd_schema(
    kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    kubectl("apply", "-f", _manifest(tmp_path, "crd.yaml", GPUUNIT_CRD))
    bad = (
        "apiVersion: runtime.lokiwager.io/v1alpha1\nkind: GPUUnit\n"
        f"metadata: {{name: unit-bad, namespace: {namespace}}}\n"
        'spec: {packageID: h200-x2, gpu: "two"}\n'
    )

    result = kubectl("apply", "-f", _manifest(tmp_path, "bad.yaml", bad), check=False)

    assert result.returncode == 1
    assert 'The GPUUnit "unit-bad" is invalid' in result.stderr
    assert "spec.gpu" in result.stderr
    assert "unit-bad" not in kubectl("get", "gpuunits", "-n", namespace, check=False).stdout


def test_get_resourceclaims_all_namespaces_as_yaml(
    sim: SimCluster, kubectl: Kubectl, namespace: str
) -> None:
    claim = {
        "metadata": {"name": "yaml-claim", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }
    sim.store.create("resourceclaims", claim)

    output = kubectl("get", "resourceclaims", "-A", "-o", "yaml").stdout

    document = yaml.safe_load(output)
    assert document["kind"] == "List"
    mine = [item for item in document["items"] if item["metadata"]["namespace"] == namespace]
    assert [item["metadata"]["name"] for item in mine] == ["yaml-claim"]
    assert mine[0]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1


def test_delete_removes_object(sim: SimCluster, kubectl: Kubectl, namespace: str) -> None:
    sim.store.create(
        "pods",
        {
            "metadata": {"name": "doomed", "namespace": namespace},
            "spec": {"containers": [{"name": "m", "image": "busybox"}]},
        },
    )

    output = kubectl("delete", "pod", "doomed", "-n", namespace).stdout
    missing = kubectl("get", "pod", "doomed", "-n", namespace, check=False)

    assert output.strip() == 'pod "doomed" deleted'
    assert sim.store.get("pods", namespace, "doomed") is None
    assert missing.returncode == 1
    assert 'pods "doomed" not found' in missing.stderr


def test_apply_twice_is_unchanged_then_configured(kubectl: Kubectl, tmp_path: Path) -> None:
    name = f"kc-apply-{uuid.uuid4().hex[:6]}"
    manifest = (
        f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n---\n"
        f"apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: gpu-quota, namespace: {name}}}\n"
        'spec: {hard: {pods: "10"}}\n---\n'
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\n"
        f"metadata: {{name: {name}.example.com}}\n"
        "spec: {selectors: [{cel: {expression: \"device.driver == 'gpu.nvidia.com'\"}}]}\n"
    )
    path = _manifest(tmp_path, "apply.yaml", manifest)

    first = kubectl("apply", "-f", path).stdout
    second = kubectl("apply", "-f", path).stdout
    Path(path).write_text(manifest.replace('pods: "10"', 'pods: "20"'))
    third = kubectl("apply", "-f", path).stdout
    quota = kubectl(
        "get", "resourcequota", "gpu-quota", "-n", name, "-o", "jsonpath={.spec.hard.pods}"
    ).stdout

    assert first.count(" created") == 3
    assert second.count(" unchanged") == 3
    assert "resourcequota/gpu-quota configured" in third
    assert quota == "20"


def test_explain_shows_the_descriptions_of_a_crd_schema(
    kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    crd = GPUUNIT_CRD.replace(
        "            required: [packageID, gpu]",
        "            description: The package contract.\n            required: [packageID, gpu]",
    ).replace(
        "gpu: {type: integer, minimum: 1}",
        "gpu: {type: integer, minimum: 1, description: GPUs sold.}",
    )
    kubectl("apply", "-f", _manifest(tmp_path, "crd.yaml", crd))

    spec = kubectl("explain", "gpuunit.spec").stdout
    gpu = kubectl("explain", "gpuunits.spec.gpu").stdout

    assert "The package contract." in spec
    assert "packageID\t<string> -required-" in spec
    assert "FIELD: gpu <integer>" in gpu
    assert "GPUs sold." in gpu
