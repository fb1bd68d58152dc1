"""k8s/ holds valid Kubernetes 1.34 objects (strict schemas, CRDs included), every manifest is
part of the kustomization, and `kubectl kustomize k8s/` builds everything the product needs."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parent.parent / "k8s"
TENANT_PROVISIONING = K8S / "components" / "tenant-provisioning"
MULTICLUSTER = K8S / "components" / "multicluster"
KUSTOMIZATION_FILES = {"kustomization.yaml"}
MANIFESTS = sorted(
    p.relative_to(K8S) for p in K8S.rglob("*.yaml") if p.name not in KUSTOMIZATION_FILES
)
# Kinds of the Prometheus Operator: no official Kubernetes schema knows them; what they say is
# checked against the product's metrics in tests/test_monitoring.py.
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}
# Gateway API kinds (the dev component's gateway): checked against the CRDs that define them.
GATEWAY_CRDS = K8S / "components" / "dev-gateway" / "gateway-api-crds.yaml"
CRD_SCHEMAS = {
    (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"]): version["schema"][
        "openAPIV3Schema"
    ]
    for crd in yaml.safe_load_all(GATEWAY_CRDS.read_text())
    if crd
    for version in crd["spec"]["versions"]
}
needs_kubectl = pytest.mark.skipif(
    shutil.which("kubectl") is None,
    reason="kubectl is not installed: cannot run `kubectl kustomize`",
)


def kustomize(directory: Path) -> list[dict]:
    """The objects `kubectl kustomize <directory>` renders."""
    built = subprocess.run(
        ["kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [doc for doc in yaml.safe_load_all(built) if doc]


def kustomize_with_tenant_provisioning(tmp_path: Path) -> list[dict]:
    return kustomize_with(TENANT_PROVISIONING, tmp_path)


def kustomize_with(component: Path, tmp_path: Path) -> list[dict]:
    """k8s/ plus an opt-in component, composed the way a user's overlay does it (an overlay
    inside k8s/ would be a kustomize cycle, so it lives outside, with relative paths)."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(K8S, overlay)],
                "components": [os.path.relpath(component, overlay)],
            }
        )
    )
    return kustomize(overlay)


def identity(obj: dict) -> tuple[str, str, str]:
    metadata = obj["metadata"]
    return obj["kind"], metadata.get("namespace", ""), metadata["name"]


@pytest.mark.parametrize("path", MANIFESTS, ids=str)
def test_source_manifest_is_valid_for_kubernetes_1_34_strict(path):
    documents = [doc for doc in yaml.safe_load_all((K8S / path).read_text()) if doc]
    assert documents
    for document in documents:
        if document["kind"] in OPERATOR_KINDS:
            assert document["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        crd_schema = CRD_SCHEMAS.get((document["apiVersion"], document["kind"]))
        if crd_schema is not None:
            jsonschema.validate(document, crd_schema)
            continue
        kubernetes_validate.validate(document, "1.34.0", strict=True)


def test_strict_validation_rejects_an_unknown_field():
    """The check above has teeth: a misspelt field in a built-in kind fails it."""
    quota = yaml.safe_load((K8S / "tenant-quota.yaml").read_text())
    quota["spec"]["hardd"] = quota["spec"].pop("hard")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(quota, "1.34.0", strict=True)


def test_every_manifest_belongs_to_a_kustomization():
    listed: set[Path] = set()
    for kustomization in K8S.rglob("kustomization.yaml"):
        spec = yaml.safe_load(kustomization.read_text())
        patches = [p["path"] for p in spec.get("patches", []) if "path" in p]  # else inline
        entries = spec.get("resources", []) + patches
        for entry in entries:
            target = (kustomization.parent / entry).resolve()
            if target.is_file():
                listed.add(target.relative_to(K8S))
    assert sorted(listed) == MANIFESTS


@needs_kubectl
def test_kustomization_builds_valid_objects_for_everything_the_product_needs():
    objects = kustomize(K8S)
    for obj in objects:
        kubernetes_validate.validate(obj, "1.34.0", strict=True)
    kinds = Counter(obj["kind"] for obj in objects)
    assert kinds == {
        "CustomResourceDefinition": 1,
        "DeviceClass": 3,
        "Namespace": 2,
        "ResourceQuota": 1,
        "ServiceAccount": 2,
        "ClusterRole": 4,  # observer, units, logs, secrets
        "ClusterRoleBinding": 4,
        "ConfigMap": 1,
        "Job": 1,
        "Deployment": 5,
        "Service": 2,
        "PodDisruptionBudget": 1,
        "NetworkPolicy": 3,
        # the control plane's writes kept to tenant namespaces, reserved names, NoSchedule taints
        "ValidatingAdmissionPolicy": 3,
        "ValidatingAdmissionPolicyBinding": 3,
    }
    names = {identity(obj) for obj in objects}
    assert {
        ("CustomResourceDefinition", "", "gpuunits.runtime.lokiwager.io"),
        ("DeviceClass", "", "nvidia-rtx-3080"),
        ("DeviceClass", "", "nvidia-h100"),
        ("DeviceClass", "", "nvidia-l40s"),
        ("Namespace", "", "runtime-instance"),
        ("ResourceQuota", "runtime-instance", "gpu-units"),
        ("Namespace", "", "gpu-control-plane"),
        ("Deployment", "gpu-control-plane", "web"),
        ("Deployment", "gpu-control-plane", "worker"),
        ("Deployment", "gpu-control-plane", "beat"),
        ("Deployment", "gpu-control-plane", "observer"),
        ("Job", "gpu-control-plane", "migrate"),
        ("Service", "gpu-control-plane", "web"),
        ("Service", "gpu-control-plane", "metrics"),
    } <= names
    # Secrets are referenced, never shipped.
    assert "Secret" not in kinds


def test_tenant_namespace_is_pod_security_restricted_with_the_articles_quota():
    namespace = yaml.safe_load((K8S / "tenant-namespace.yaml").read_text())
    quota = yaml.safe_load((K8S / "tenant-quota.yaml").read_text())
    labels = namespace["metadata"]["labels"]
    for mode in ("enforce", "warn", "audit"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    assert quota["metadata"]["namespace"] == namespace["metadata"]["name"] == "runtime-instance"
    assert quota["spec"]["hard"] == {
        "requests.cpu": "160",
        "requests.memory": "256Gi",
        "count/resourceclaims.resource.k8s.io": "64",
        "requests.storage": "1Ti",
        "persistentvolumeclaims": "16",
        # Ops settings' defaults: NODE_PORTS_PER_TENANT, LOAD_BALANCERS_PER_TENANT; the
        # tenant's ephemeral storage quota.
        "services.nodeports": "32",
        "services.loadbalancers": "8",
        "requests.ephemeral-storage": "1Ti",
        "limits.ephemeral-storage": "1Ti",
        "count/secrets": "64",
    }


def test_device_classes_select_the_sample_catalogs_gpus_by_product_name():
    catalog = yaml.safe_load((K8S.parent / "catalog" / "samples" / "packages.yaml").read_text())
    # The MIG and shared-GPU classes come with NVIDIA's and HAMi's drivers, not with k8s/.
    drivers = {"mig.nvidia.com", "hami-core-gpu.project-hami.io"}
    wanted = {p["allocation"]["deviceClassName"] for p in catalog["packages"]} - drivers
    classes = {
        doc["metadata"]["name"]: doc
        for doc in yaml.safe_load_all((K8S / "deviceclasses.yaml").read_text())
    }
    assert wanted <= set(classes)
    for device_class in classes.values():
        (selector,) = device_class["spec"]["selectors"]
        expression = selector["cel"]["expression"]
        assert 'device.driver == "gpu.nvidia.com"' in expression
        assert 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA ' in expression


@needs_kubectl
def test_tenant_provisioning_is_an_opt_in_component(tmp_path):
    def namespace_rules(objects: list[dict]) -> list[dict]:
        return [
            rule
            for obj in objects
            if obj["kind"] in ("ClusterRole", "Role")
            for rule in obj["rules"]
            if "namespaces" in rule["resources"]
        ]

    assert namespace_rules(kustomize(K8S)) == []
    with_component = kustomize_with_tenant_provisioning(tmp_path)
    for obj in with_component:
        kubernetes_validate.validate(obj, "1.34.0", strict=True)
    assert namespace_rules(with_component) == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "create", "patch"]}
    ]


@needs_kubectl
def test_tenant_provisioning_component_turns_the_setting_on(tmp_path):
    def setting(objects: list[dict]) -> str:
        config = next(o for o in objects if o["kind"] == "ConfigMap")
        return config["data"]["TENANT_NAMESPACE_PROVISIONING"]

    assert setting(kustomize(K8S)) == "0"
    assert setting(kustomize_with_tenant_provisioning(tmp_path)) == "1"


def test_the_multicluster_component_mounts_each_account_its_own_kubeconfigs(tmp_path):
    """CLUSTER_CREDENTIALS_DIR, /etc/controlplane/kubeconfigs: the Secret of the pod's own
    ServiceAccount (its keys kubeconfig-<cluster>) in the pods that reach clusters (web for logs
    and secrets, workers, observer), never in beat's or the webhook worker's."""
    objects = kustomize_with(MULTICLUSTER, tmp_path)
    deployments = {
        obj["metadata"]["name"]: obj["spec"]["template"]["spec"]
        for obj in objects
        if obj["kind"] == "Deployment"
    }
    config = next(o for o in objects if o["kind"] == "ConfigMap")["data"]
    assert config.get("CLUSTER_CREDENTIALS_DIR", "/etc/controlplane/kubeconfigs") == (
        "/etc/controlplane/kubeconfigs"
    )
    secrets = {
        "gpu-control-plane": "cluster-kubeconfigs",
        "gpu-control-plane-unprivileged": "cluster-kubeconfigs-unprivileged",
    }
    for name in ("web", "worker", "observer"):
        pod = deployments[name]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "cluster-kubeconfigs"]
        assert volume["secret"] == {
            "secretName": secrets[pod["serviceAccountName"]],
            "optional": True,
            "defaultMode": 0o444,
        }
        assert {
            "name": "cluster-kubeconfigs",
            "mountPath": "/etc/controlplane/kubeconfigs",
            "readOnly": True,
        } in pod["containers"][0]["volumeMounts"]
    for name in ("beat", "webhook-worker"):
        assert all(v["name"] != "cluster-kubeconfigs" for v in deployments[name].get("volumes", []))
