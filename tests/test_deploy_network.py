"""Network isolation of what k8s/ deploys: the control plane's namespace is default-deny for
ingress (web from the gateway's namespace, the metrics ports from the monitoring namespace, read
by the NetworkPolicy evaluator of runtime/tests/test_network_isolation.py against the
Deployments' own pod labels and ports), web's /metrics token is scraped from the Secret, and
a real API server takes every NetworkPolicy the product ships or builds, as built (the
development clusters store them; with no CNI nothing enforces them there)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devstack.cluster import DevCluster
from runtime import manifests
from runtime.tests.test_manifests import OWNER_UID
from runtime.tests.test_network_isolation import (
    NODE_CIDRS,
    POD_CIDRS,
    SERVICE_CIDRS,
    UNIT,
    Endpoint,
    allows,
    assert_valid,
)
from tests.test_deploy_workloads import NAMESPACE, OBJECTS, WORKLOADS
from tests.test_manifests import K8S

POLICIES = [obj for (kind, _), obj in OBJECTS.items() if kind == "NetworkPolicy"]
SECRET = "gpu-control-plane-secrets"


def _pod(workload: str, ip: str) -> Endpoint:
    """A pod of the workload as its template makes it: its labels and named ports."""
    template = WORKLOADS[workload]["spec"]["template"]
    ports = {
        port["name"]: port["containerPort"]
        for container in template["spec"]["containers"]
        for port in container.get("ports", [])
    }
    return Endpoint(ip, NAMESPACE, template["metadata"]["labels"], ports)


WEB, WORKER, OBSERVER, BEAT = (
    _pod("web", "10.244.1.10"),
    _pod("worker", "10.244.1.11"),
    _pod("observer", "10.244.1.12"),
    _pod("beat", "10.244.1.13"),
)


def _from(namespace: str, ip: str) -> Endpoint:
    return Endpoint(ip, namespace, {"app": "client"})


GATEWAY = _from("gateway-system", "10.244.2.2")
INGRESS_NGINX = _from("ingress-nginx", "10.244.2.3")
PROMETHEUS = _from("monitoring", "10.244.3.3")
TENANT_UNIT = _from("runtime-instance", "10.244.4.4")

# (source, destination, port, whether the source may connect)
REACH = [
    (GATEWAY, WEB, 8000, True),
    (INGRESS_NGINX, WEB, 8000, True),
    (GATEWAY, WEB, 8001, False),
    (GATEWAY, WORKER, 9808, False),
    (GATEWAY, OBSERVER, 9809, False),
    (PROMETHEUS, WEB, 8000, True),
    (PROMETHEUS, WORKER, 9808, True),
    (PROMETHEUS, OBSERVER, 9809, True),
    (PROMETHEUS, WORKER, 5555, False),
    (PROMETHEUS, BEAT, 9808, False),  # beat serves nothing
    # A tenant's unit, the internet and the control plane's own pods reach none of it.
    (TENANT_UNIT, WEB, 8000, False),
    (TENANT_UNIT, WORKER, 9808, False),
    (TENANT_UNIT, OBSERVER, 9809, False),
    (Endpoint("8.8.8.8"), WEB, 8000, False),
    (Endpoint("2606:4700::1111"), OBSERVER, 9809, False),
    (BEAT, WEB, 8000, False),
    (WEB, WORKER, 9808, False),
]


def test_the_control_plane_admits_the_gateway_to_web_and_monitoring_to_metrics_only():
    wrong = [
        f"{source.namespace or source.ip} to {dict(destination.labels)} port {port} "
        f"should be {'allowed' if expected else 'denied'}"
        for source, destination, port, expected in REACH
        if allows(POLICIES, source, destination, port) != expected
    ]
    assert wrong == []


def test_every_control_plane_pod_is_isolated_for_ingress_by_a_policy_that_admits_nothing():
    (deny,) = [p for p in POLICIES if not p["spec"].get("ingress")]
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    for policy in POLICIES:
        assert policy["metadata"]["namespace"] == NAMESPACE
        assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open
        assert_valid(policy)


def test_the_service_monitor_sends_web_the_metrics_token_from_the_secret():
    monitor = yaml.safe_load(
        (K8S / "components" / "monitoring" / "servicemonitor.yaml").read_text()
    )
    endpoints = {endpoint["port"]: endpoint for endpoint in monitor["spec"]["endpoints"]}
    assert endpoints["http"]["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": SECRET, "key": "METRICS_TOKEN"},
    }
    assert monitor["metadata"]["namespace"] == NAMESPACE  # where that Secret is


# --- The API server stores every policy as it was sent (the controller's `ensure` compares
# the spec it built with the one it reads back).

TENANT_NAMESPACE = K8S / "tenant-namespace.yaml"


@pytest.fixture
def sim(tmp_path) -> Iterator[DevCluster]:
    with DevCluster(tmp_path / "cluster", topology={"deviceClasses": [], "nodes": []}) as cluster:
        yield cluster


def _kubectl(sim: DevCluster, tmp_path: Path, *args: str) -> str:
    config = sim.write_kubeconfig(tmp_path / "kubeconfig")
    env = {"HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(config), "--cache-dir", str(tmp_path / "c"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_the_api_server_takes_every_policy_as_built(sim, tmp_path):
    namespace = yaml.safe_load(TENANT_NAMESPACE.read_text())["metadata"]["name"]
    unit = dataclasses.replace(UNIT, namespace=namespace)
    cluster = POD_CIDRS + SERVICE_CIDRS + NODE_CIDRS
    built = [
        manifests.build_tenant_network_policy(
            namespace,
            tenant=unit.tenant,
            gateway_namespace="gateway-system",
            egress_allow=["10.20.0.0/16", "2001:db8:ffff::/48"],
            cluster_cidrs=cluster,
        ),
        manifests.build_unit_network_policy(
            unit, owner_uid=OWNER_UID, public_ports=[{"port": 8080}], cluster_cidrs=cluster
        ),
    ]
    for policy in built:
        # The owner does not exist in this cluster: the garbage collector is not the subject.
        policy["metadata"].pop("ownerReferences", None)
    (tmp_path / "built.yaml").write_text(yaml.safe_dump_all(built))
    shipped = K8S / "control-plane"
    _kubectl(
        sim,
        tmp_path,
        "apply",
        *("-f", str(shipped / "namespace.yaml"), "-f", str(TENANT_NAMESPACE)),
    )
    applied = _kubectl(
        sim,
        tmp_path,
        "apply",
        *("-f", str(shipped / "networkpolicy.yaml"), "-f", str(tmp_path / "built.yaml")),
    )
    assert applied.count("networkpolicy.networking.k8s.io/") == len(POLICIES) + len(built)
    assert "created" in applied
    stored = json.loads(_kubectl(sim, tmp_path, "get", "networkpolicies", "-A", "-o", "json"))
    found = {
        (item["metadata"]["namespace"], item["metadata"]["name"]): item["spec"]
        for item in stored["items"]
    }
    for policy in [*POLICIES, *built]:
        key = (policy["metadata"]["namespace"], policy["metadata"]["name"])
        assert found[key] == policy["spec"], key
