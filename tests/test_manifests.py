"""The manifests in k8s/ are valid Kubernetes 1.34 objects and the kustomization builds."""

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parent.parent / "k8s"
MANIFESTS = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid_for_kubernetes_1_34_strict(path):
    for document in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(document, "1.34.0", strict=True)


def test_kustomization_lists_every_manifest_and_builds():
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == [p.name for p in MANIFESTS]
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: cannot run `kubectl kustomize`")
    built = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, check=True
    ).stdout
    kinds = [doc["kind"] for doc in yaml.safe_load_all(built)]
    assert sorted(kinds) == [
        "CustomResourceDefinition",
        *["DeviceClass"] * 3,
        "Namespace",
        "ResourceQuota",
    ]
