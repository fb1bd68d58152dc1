"""The dev component (Gateway API CRDs, a Gateway, a default StorageClass) and Kubernetes-docs
style manifests of the new kinds, applied with kubectl (strict validation) and read back as
kubectl tables."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from simcluster.cluster import SimCluster
from simcluster.tests.conftest import Kubectl

ROOT = Path(__file__).resolve().parents[2]
DEV_GATEWAY = ROOT / "k8s" / "components" / "dev-gateway"

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")

# Shaped as the Kubernetes documentation's examples (Service, Secret, ConfigMap, PVC and a pod
# mounting them; "test-network-policy"; "minimal-ingress").
DOCS_MANIFESTS = """
apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  type: NodePort
  selector:
    app.kubernetes.io/name: MyApp
  ports:
    - port: 80
      targetPort: 80
      nodePort: 30007
---
apiVersion: v1
kind: Secret
metadata:
  name: dotfile-secret
type: Opaque
stringData:
  .secret-file: value-2
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: game-demo
data:
  player_initial_lives: "3"
  game.properties: |
    enemy.types=aliens,monsters
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: task-pv-claim
spec:
  accessModes:
    - ReadWriteOnce
  resources:
    requests:
      storage: 3Gi
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: test-network-policy
spec:
  podSelector:
    matchLabels:
      role: db
  policyTypes:
    - Ingress
    - Egress
  ingress:
    - from:
        - ipBlock:
            cidr: 172.17.0.0/16
            except:
              - 172.17.1.0/24
        - namespaceSelector:
            matchLabels:
              project: myproject
      ports:
        - protocol: TCP
          port: 6379
  egress:
    - to:
        - ipBlock:
            cidr: 10.0.0.0/24
      ports:
        - protocol: TCP
          port: 5978
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: minimal-ingress
  annotations:
    nginx.ingress.kubernetes.io/rewrite-target: /
spec:
  ingressClassName: nginx-example
  rules:
  - http:
      paths:
      - path: /testpath
        pathType: Prefix
        backend:
          service:
            name: test
            port:
              number: 80
"""


def _table(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines() if line.strip()]


def test_dev_objects_apply_idempotently_in_process() -> None:
    with SimCluster(topology={"nodes": []}) as sim:
        first = sim.apply_manifests(DEV_GATEWAY)
        assert sim.apply_manifests(DEV_GATEWAY) == first
        assert "gateways/gpu-gateway" in first
        gateway = sim.store.get(
            "gateways.gateway.networking.k8s.io", "gateway-system", "gpu-gateway"
        )
        assert gateway is not None
        conditions = {c["type"]: c["status"] for c in gateway["status"]["conditions"]}
        assert conditions == {"Accepted": "True", "Programmed": "True"}
        storage_class = sim.store.get("storageclasses", None, "standard")
        assert storage_class is not None
        assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"


@pytest.mark.kubectl
@needs_kubectl
def test_dev_gateway_component_applies_with_kubectl_and_prints_its_columns(
    sim: SimCluster, kubectl: Kubectl
) -> None:
    kubectl("apply", "-f", str(DEV_GATEWAY / "gateway-api-crds.yaml"))
    kubectl("apply", "-f", str(DEV_GATEWAY / "gateway.yaml"))
    kubectl("apply", "-f", str(DEV_GATEWAY / "storageclass.yaml"))
    again = kubectl("apply", "-f", str(DEV_GATEWAY / "gateway.yaml"))
    assert "gateway.gateway.networking.k8s.io/gpu-gateway unchanged" in again.stdout
    gateways = _table(kubectl("get", "gtw", "-n", "gateway-system").stdout)
    assert gateways[0] == ["NAME", "CLASS", "ADDRESS", "PROGRAMMED", "AGE"]
    assert gateways[1][:4] == ["gpu-gateway", "simcluster", "192.0.2.1", "True"]
    classes = _table(kubectl("get", "gc").stdout)
    assert classes[1][:3] == ["simcluster", "simcluster.dev/gateway-controller", "True"]
    storage = _table(kubectl("get", "sc", "standard").stdout)
    assert storage[0][:5] == [
        "NAME",
        "PROVISIONER",
        "RECLAIMPOLICY",
        "VOLUMEBINDINGMODE",
        "ALLOWVOLUMEEXPANSION",
    ]
    assert storage[1][:6] == [
        "standard",
        "(default)",
        "rancher.io/local-path",
        "Delete",
        "WaitForFirstConsumer",
        "false",
    ]
    explained = kubectl("explain", "httproute.spec.hostnames").stdout
    assert "Hostnames defines a set of hostnames" in explained
    resources = kubectl("api-resources", "--api-group=gateway.networking.k8s.io").stdout
    assert "gtw" in resources
    assert "gc" in resources


@pytest.mark.kubectl
@needs_kubectl
def test_docs_manifests_apply_cleanly_and_print_as_tables(
    sim: SimCluster, kubectl: Kubectl, tmp_path: Path
) -> None:
    namespace = f"docs-{uuid.uuid4().hex[:8]}"
    sim.store.create("namespaces", {"metadata": {"name": namespace}})
    manifest = tmp_path / "docs.yaml"
    manifest.write_text(DOCS_MANIFESTS)
    applied = kubectl("apply", "-n", namespace, "-f", str(manifest))
    assert "service/my-service created" in applied.stdout
    assert "ingress.networking.k8s.io/minimal-ingress created" in applied.stdout
    assert applied.stderr == ""
    unchanged = kubectl("apply", "-n", namespace, "-f", str(manifest)).stdout
    # As on a real server: stringData is never stored, so the Secret always differs.
    assert unchanged.count("unchanged") == 5
    assert "secret/dotfile-secret configured" in unchanged
    services = _table(kubectl("get", "svc", "-n", namespace, "-o", "wide").stdout)
    assert services[0] == [
        "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR",
    ]  # fmt: skip
    assert services[1][:2] == ["my-service", "NodePort"]
    assert services[1][3:5] == ["<none>", "80:30007/TCP"]
    secrets = _table(kubectl("get", "secret", "dotfile-secret", "-n", namespace).stdout)
    assert secrets[1][:3] == ["dotfile-secret", "Opaque", "1"]
    config_maps = _table(kubectl("get", "cm", "game-demo", "-n", namespace).stdout)
    assert config_maps[1][:2] == ["game-demo", "2"]
    claims = _table(kubectl("get", "pvc", "-n", namespace).stdout)
    assert claims[0][:3] == ["NAME", "STATUS", "VOLUME"]
    assert claims[1][0] == "task-pv-claim"
    policies = _table(kubectl("get", "netpol", "-n", namespace).stdout)
    assert policies[1][:2] == ["test-network-policy", "role=db"]
    ingresses = _table(kubectl("get", "ing", "-n", namespace).stdout)
    assert ingresses[0][:5] == ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS"]
    assert ingresses[1][:5] == ["minimal-ingress", "nginx-example", "*", "192.0.2.1", "80"]
    kubectl("delete", "namespace", namespace, "--wait=false")
