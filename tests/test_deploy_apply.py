"""`kubectl apply -f` of the shipped CRD, tenant namespace, quota and DeviceClasses against a
fresh development cluster that has GPUs but no device classes of its own, then the runtime
provisions a unit there to Running: the applied objects are all it needs."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings

from catalog.tests.factories import PackageFactory
from controlplane import kube
from devstack.cluster import DevCluster
from runtime import orders
from runtime.control import provisioning
from runtime.models import Operation
from runtime.tests.helpers import wait_for_phase
from tenancy import services as tenancy_services
from tenancy.models import Tenant
from tests.test_manifests import K8S

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
    pytest.mark.django_db,
]

APPLY_ORDER = [
    "gpuunit-crd.yaml",
    "tenant-namespace.yaml",
    "tenant-quota.yaml",
    "deviceclasses.yaml",
]
# One RTX 3080 node and no DeviceClasses: only the applied ones can make a claim allocatable.
TOPOLOGY = {
    "deviceClasses": [],
    "nodes": [
        {
            "name": "gpu-node-0",
            "cpu": "64",
            "memory": "256Gi",
            "gpus": [{"product": "NVIDIA GeForce RTX 3080", "count": 4}],
        }
    ],
}
Kubectl = Callable[..., str]


@pytest.fixture
def sim(tmp_path) -> Iterator[DevCluster]:
    with DevCluster(tmp_path / "cluster", topology=TOPOLOGY, proxy=True) as cluster:
        yield cluster


@pytest.fixture
def kubeconfig(sim: DevCluster, tmp_path: Path) -> Path:
    return sim.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kubectl(kubeconfig: Path, tmp_path: Path) -> Kubectl:
    env = {"HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def run(*args: str) -> str:
        command = ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "c")]
        result = subprocess.run(
            [*command, *args], capture_output=True, text=True, timeout=60, env=env, check=False
        )
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    return run


@pytest.fixture
def control_plane_on(kubeconfig: Path) -> Iterator[None]:
    """Point this process's Kubernetes client at the fresh cluster, and back afterwards."""
    previous = settings.KUBECONFIG
    settings.KUBECONFIG = str(kubeconfig)
    kube.reset()
    yield
    settings.KUBECONFIG = previous
    kube.reset()


def _default_tenant() -> Tenant:
    # The data migration creates it; transactional tests elsewhere may have flushed it.
    return Tenant.objects.filter(slug="default").first() or tenancy_services.create_tenant(
        slug="default", namespace="runtime-instance"
    )


def test_applied_manifests_are_all_a_unit_needs_to_run(sim, kubectl, control_plane_on):
    assert kube.list_objects(kube.DEVICECLASS) == []
    files = [arg for name in APPLY_ORDER for arg in ("-f", str(K8S / name))]
    assert kubectl("apply", *files).splitlines() == [
        "customresourcedefinition.apiextensions.k8s.io/gpuunits.runtime.lokiwager.io created",
        "namespace/runtime-instance created",
        "resourcequota/gpu-units created",
        "deviceclass.resource.k8s.io/nvidia-rtx-3080 created",
        "deviceclass.resource.k8s.io/nvidia-h100 created",
        "deviceclass.resource.k8s.io/nvidia-l40s created",
    ]
    assert all(line.endswith(" unchanged") for line in kubectl("apply", *files).splitlines())

    tenant = _default_tenant()
    PackageFactory(article=True)
    unit = orders.create_unit(
        tenant=tenant,
        operation_id="deploy-apply-1",
        name="applied",
        package_id="gpu-rtx3080-2x-cpu10-mem40g",
        image="python:3.12",
    ).unit
    sim.requests.clear()
    provisioning.provision_unit(operation_pk=Operation.objects.get(unit=unit).pk)
    unit = wait_for_phase(unit, "Running", timeout=20)

    assert unit.node_name == "gpu-node-0"
    assert unit.dra["allocated"] is True
    assert len(unit.dra["devices"]) == 2
    listed = kubectl("get", "gpuunits,resourceclaims,pods", "-n", "runtime-instance", "-o", "name")
    assert sorted(listed.split()) == [
        "gpuunit.runtime.lokiwager.io/applied",
        "pod/unit-applied",
        "resourceclaim.resource.k8s.io/unit-applied-gpu",
    ]
    # The shipped namespace and quota are exactly what the control plane wants for the default
    # tenant: its create attempts meet 409 and it patches neither.
    tenant_objects = [
        (e.verb, e.resource, e.code)
        for e in sim.requests.entries()
        if e.resource in ("namespaces", "resourcequotas") and e.verb not in ("get", "list")
    ]
    assert tenant_objects == [("create", "namespaces", 409), ("create", "resourcequotas", 409)]
