"""The DRA drivers' own demo manifests on a development cluster (the real kube-apiserver,
scheduler and controller-manager of 1.36, KWOK nodes), applied as their READMEs say, with the
outcome the real scheduler gives: NVIDIA's quickstart (gpu-test1..6, gpu-test-mps),
dra-example-driver's basic examples, and the Kubernetes documentation's DRA examples.

Every manifest is rewritten here (not copied), keeping the kinds, names, claims, templates,
requests, selectors, constraints and config of the source named above each scenario. Each test
gets a fresh cluster whose development driver publishes devices as that driver does
(devstack/driver.py), with the DeviceClass its chart installs, so the manifests keep their own
class and driver names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from kubernetes import client, config, utils

from devstack.cluster import DevCluster

# `kubectl get resourceclaim` STATE and the template controller's annotation.
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
NVIDIA = "gpu.nvidia.com"
EXAMPLE = "gpu.example.com"
A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")


T = TypeVar("T")


def wait_until(
    read: Callable[[], T], done: Callable[[T], bool], what: str, *, timeout: float = 30.0
) -> T:
    """Poll `read()` until `done` says yes; fail naming `what` and the last value once
    `timeout` seconds have passed (a bound for a loaded machine, not a speed check)."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; last value: {value}")
        time.sleep(0.05)


class Demo:
    """One fresh cluster: the official client, kubectl, and the reads the scenarios assert."""

    def __init__(self, sim: DevCluster, tmp_path: Path) -> None:
        self.sim = sim
        self.tmp_path = tmp_path
        self.kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        self.api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api)
        self.resource = client.ResourceV1Api(self.api)

    # -- putting manifests in, as a user would ------------------------------------------------

    def create(self, manifests: str) -> None:
        """Create every object of a YAML stream through the official client."""
        for manifest in yaml.safe_load_all(manifests):
            if manifest:
                utils.create_from_dict(self.api, manifest)

    def kubectl(self, *args: str) -> str:
        env = {
            "HOME": str(self.tmp_path / "home"),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        }
        command = ["kubectl", "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=60, env=env, check=False
        )
        if result.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result.stdout

    def apply(self, name: str, manifests: str) -> str:
        """`kubectl apply -f <file>` of a manifest file written here."""
        path = self.tmp_path / f"{name}.yaml"
        path.write_text(manifests)
        return self.kubectl("apply", "-f", str(path))

    # -- reading the outcome ------------------------------------------------------------------

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        raw = self.core.read_namespaced_pod(name, namespace)
        return dict(self.api.sanitize_for_serialization(raw))

    def running(self, namespace: str, name: str) -> dict[str, Any]:
        return wait_until(
            lambda: self.pod(namespace, name),
            lambda p: p["status"].get("phase") == "Running",
            f"pod {namespace}/{name} Running",
        )

    def not_scheduled(self, namespace: str, name: str) -> dict[str, Any]:
        """The pod's PodScheduled=False condition, once the scheduler has tried it."""

        def condition() -> dict[str, Any] | None:
            for entry in self.pod(namespace, name)["status"].get("conditions") or []:
                if entry["type"] == "PodScheduled" and entry["status"] == "False":
                    return dict(entry)
            return None

        found = wait_until(
            condition, lambda c: c is not None, f"pod {namespace}/{name} not scheduled"
        )
        assert found is not None
        return found

    def events(self, namespace: str, pod: str, reason: str) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            listed = self.core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={pod}"
            )
            return [
                dict(self.api.sanitize_for_serialization(e))
                for e in listed.items
                if e.reason == reason
            ]

        return wait_until(read, bool, f"a {reason} event for {namespace}/{pod}")

    def claim(self, namespace: str, name: str) -> dict[str, Any]:
        raw = self.resource.read_namespaced_resource_claim(name, namespace)
        return dict(self.api.sanitize_for_serialization(raw))

    def allocated(self, namespace: str, name: str) -> dict[str, Any]:
        return wait_until(
            lambda: self.claim(namespace, name),
            lambda c: bool((c.get("status") or {}).get("allocation")),
            f"claim {namespace}/{name} allocated",
        )

    def generated_claim(self, namespace: str, pod: str, pod_claim: str) -> dict[str, Any]:
        """The claim the resourceclaim controller made for `pod`'s template entry, found as a
        user finds it: through pod.status.resourceClaimStatuses."""

        def name() -> str | None:
            statuses = self.pod(namespace, pod)["status"].get("resourceClaimStatuses") or []
            return next(
                (s.get("resourceClaimName") for s in statuses if s["name"] == pod_claim), None
            )

        claim_name = wait_until(name, bool, f"resourceClaimStatuses[{pod_claim}] of {pod}")
        assert claim_name is not None
        return self.claim(namespace, claim_name)

    def slice_devices(self, driver: str) -> dict[tuple[str, str], dict[str, Any]]:
        """(pool, device name) -> device, over the driver's published slices."""
        found = {}
        for item in self.resource.list_resource_slice(field_selector=f"spec.driver={driver}").items:
            raw = self.api.sanitize_for_serialization(item)
            for device in raw["spec"].get("devices") or []:
                found[(raw["spec"]["pool"]["name"], device["name"])] = device
        return found

    def close(self) -> None:
        self.api.close()


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list(claim["status"]["allocation"]["devices"]["results"])


def _devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["driver"], r["pool"], r["device"]) for r in _results(claim)]


def _reserved_for(claim: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((r["resource"], r["name"]) for r in claim["status"].get("reservedFor") or [])


def _assert_generated(claim: dict[str, Any], pod: dict[str, Any], pod_claim: str) -> None:
    """What the resourceclaim controller gives a template claim: a `<pod>-<claim>-<5>` name,
    the pod-claim-name annotation, and the pod as controlling owner."""
    metadata = claim["metadata"]
    pod_name = pod["metadata"]["name"]
    assert re.fullmatch(
        rf"{re.escape(pod_name)}-{re.escape(pod_claim)}-[a-z0-9]{{5}}", metadata["name"]
    )
    assert metadata["annotations"][POD_CLAIM_NAME] == pod_claim
    owners = metadata["ownerReferences"]
    assert [(o["kind"], o["name"], o["uid"], o.get("controller")) for o in owners] == [
        ("Pod", pod_name, pod["metadata"]["uid"], True)
    ]
    assert _reserved_for(claim) == [("pods", pod_name)]


def _node_of(claim: dict[str, Any]) -> str:
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    return str(terms[0]["matchFields"][0]["values"][0])


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], Demo]]:
    started: list[tuple[DevCluster, Demo]] = []

    def make(topology: dict[str, Any]) -> Demo:
        sim = DevCluster(tmp_path / f"cluster-{len(started)}", topology=topology)
        sim.start()
        demo = Demo(sim, tmp_path)
        started.append((sim, demo))
        return demo

    yield make
    for sim, demo in started:
        demo.close()
        sim.stop()


# -- NVIDIA k8s-dra-driver-gpu ----------------------------------------------------------------

# The half-balanced layout of demo/specs/quickstart/mig-parted-config.yaml (two 1g, one 2g, one
# 3g per GPU on GPUs 0-3, GPUs 4-7 whole) with the development driver's H100 profiles in place of
# the A100-40GB ones (1g.5gb -> 1g.10gb, 2g.10gb -> 2g.20gb, 3g.20gb -> 3g.40gb). Whole GPUs
# and MIG devices sit on two nodes: one pool per node, as the driver publishes them.
MIG_LAYOUT = ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
NVIDIA_TOPOLOGY: dict[str, Any] = {
    "products": {
        A100: {"memory": "40Gi", "architecture": "Ampere", "cudaComputeCapability": "8.0.0"},
    },
    # The classes NVIDIA's Helm chart installs (deployments/helm/.../deviceclass-*.yaml).
    "deviceClasses": [
        {
            "name": "gpu.nvidia.com",
            "selectors": [
                "device.driver == 'gpu.nvidia.com' && "
                "device.attributes['gpu.nvidia.com'].type == 'gpu'"
            ],
        },
        {
            "name": "mig.nvidia.com",
            "selectors": [
                "device.driver == 'gpu.nvidia.com' && "
                "device.attributes['gpu.nvidia.com'].type == 'mig'"
            ],
        },
    ],
    "nodes": [
        {
            "name": "gpu-node-a100",
            "cpu": "128",
            "memory": "1Ti",
            "gpus": [{"product": A100, "count": 4}],
        },
        {
            "name": "gpu-node-mig",
            "cpu": "128",
            "memory": "1Ti",
            "migGpus": [{"product": H100, "layout": MIG_LAYOUT} for _ in range(4)],
        },
    ],
}

# NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test1.yaml: two pods, one
# ResourceClaimTemplate, so each pod gets a claim and a GPU of its own.
GPU_TEST1 = """
apiVersion: v1
kind: Namespace
metadata: {name: gpu-test1}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: gpu-test1, name: single-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
""" + "".join(
    f"""---
apiVersion: v1
kind: Pod
metadata:
  namespace: gpu-test1
  name: {pod}
  labels: {{app: pod}}
spec:
  containers:
  - name: ctr
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: single-gpu
  tolerations:
  - {{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}
"""
    for pod in ("pod1", "pod2")
)


@needs_kubectl
def test_nvidia_gpu_test1_each_pod_its_own_gpu(start: Callable[..., Demo]) -> None:
    demo = start(NVIDIA_TOPOLOGY)
    out = demo.apply("gpu-test1", GPU_TEST1)
    assert "pod/pod1 created" in out
    assert "resourceclaimtemplate.resource.k8s.io/single-gpu" in out
    claims = {}
    for name in ("pod1", "pod2"):
        pod = demo.running("gpu-test1", name)
        claim = demo.generated_claim("gpu-test1", name, "gpu")
        _assert_generated(claim, pod, "gpu")
        assert pod["status"]["resourceClaimStatuses"] == [
            {"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}
        ]
        assert pod["spec"]["nodeName"] == "gpu-node-a100" == _node_of(claim)
        [result] = _results(claim)
        assert result["request"] == "gpu"
        assert result["driver"] == NVIDIA
        claims[name] = claim
    first, second = (_devices(claims[n]) for n in ("pod1", "pod2"))
    assert first != second  # distinct GPUs
    published = demo.slice_devices(NVIDIA)
    for _driver, pool, device in first + second:
        assert published[(pool, device)]["attributes"]["type"] == {"string": "gpu"}
    # kubectl shows both claims in use.
    table = demo.kubectl("get", "resourceclaims", "-n", "gpu-test1", "--no-headers")
    assert [line.split()[1] for line in table.strip().splitlines()] == [
        "allocated,reserved",
        "allocated,reserved",
    ]


# NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test2.yaml: one pod, two containers
# naming the same template claim, so both see one GPU.
GPU_TEST2 = """
apiVersion: v1
kind: Namespace
metadata: {name: gpu-test2}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: gpu-test2, name: single-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: v1
kind: Pod
metadata:
  namespace: gpu-test2
  name: pod
  labels: {app: pod}
spec:
  containers:
  - name: ctr0
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims: [{name: shared-gpu}]
  - name: ctr1
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims: [{name: shared-gpu}]
  resourceClaims:
  - name: shared-gpu
    resourceClaimTemplateName: single-gpu
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
"""


def test_nvidia_gpu_test2_two_containers_share_one_claim(start: Callable[..., Demo]) -> None:
    demo = start(NVIDIA_TOPOLOGY)
    demo.create(GPU_TEST2)
    pod = demo.running("gpu-test2", "pod")
    assert [c["name"] for c in pod["status"]["containerStatuses"]] == ["ctr0", "ctr1"]
    assert all(c["ready"] for c in pod["status"]["containerStatuses"])
    claim = demo.generated_claim("gpu-test2", "pod", "shared-gpu")
    _assert_generated(claim, pod, "shared-gpu")
    [result] = _results(claim)  # one GPU, for both containers
    assert (result["request"], result["driver"], result["pool"]) == ("gpu", NVIDIA, "gpu-node-a100")
    assert len(demo.resource.list_namespaced_resource_claim("gpu-test2").items) == 1


# NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test3.yaml: a ResourceClaim the user
# creates, named by two pods, so both share its one GPU.
GPU_TEST3 = """
apiVersion: v1
kind: Namespace
metadata: {name: gpu-test3}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {namespace: gpu-test3, name: single-gpu}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com}
""" + "".join(
    f"""---
apiVersion: v1
kind: Pod
metadata:
  namespace: gpu-test3
  name: {pod}
  labels: {{app: pod}}
spec:
  containers:
  - name: ctr
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims: [{{name: shared-gpu}}]
  resourceClaims:
  - name: shared-gpu
    resourceClaimName: single-gpu
  tolerations:
  - {{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}
"""
    for pod in ("pod1", "pod2")
)


@needs_kubectl
def test_nvidia_gpu_test3_two_pods_share_one_claim(start: Callable[..., Demo]) -> None:
    demo = start(NVIDIA_TOPOLOGY)
    demo.apply("gpu-test3", GPU_TEST3)
    pods = [demo.running("gpu-test3", name) for name in ("pod1", "pod2")]
    claim = demo.allocated("gpu-test3", "single-gpu")
    assert _reserved_for(claim) == [("pods", "pod1"), ("pods", "pod2")]
    assert sorted(r["uid"] for r in claim["status"]["reservedFor"]) == sorted(
        p["metadata"]["uid"] for p in pods
    )
    assert "ownerReferences" not in claim["metadata"]  # the user's claim, never the pods'
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    [result] = _results(claim)
    assert result["driver"] == NVIDIA
    # Both pods run where the one GPU is; neither gets a resourceClaimStatuses entry.
    node = _node_of(claim)
    assert [p["spec"]["nodeName"] for p in pods] == [node, node]
    assert all(not p["status"].get("resourceClaimStatuses") for p in pods)


# NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test4.yaml: a template asking four
# MIG devices (two 1g, one 2g, one 3g) constrained to one parent GPU (matchAttribute
# parentUUID over all requests), each container getting one request, in a Deployment of 4
# replicas. Profiles adapted to H100 (see MIG_LAYOUT).
GPU_TEST4_TEMPLATE = """
apiVersion: v1
kind: Namespace
metadata: {name: gpu-test4}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: gpu-test4, name: mig-devices}
spec:
  spec:
    devices:
      requests:
      - name: mig-1g-10gb-0
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}
      - name: mig-1g-10gb-1
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}
      - name: mig-2g-20gb
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '2g.20gb'"}
      - name: mig-3g-40gb
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"}
      constraints:
      - requests: []
        matchAttribute: "gpu.nvidia.com/parentUUID"
"""
GPU_TEST4_REQUESTS = ["mig-1g-10gb-0", "mig-1g-10gb-1", "mig-2g-20gb", "mig-3g-40gb"]


def _gpu_test4_deployment(replicas: int) -> str:
    containers = "".join(
        f"""
      - name: ctr{number}
        image: ubuntu:22.04
        command: ["bash", "-c"]
        args: ["nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
        resources:
          claims: [{{name: mig-devices, request: {request}}}]"""
        for number, request in enumerate(GPU_TEST4_REQUESTS)
    )
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{namespace: gpu-test4, name: pod}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: pod}}}}
  template:
    metadata: {{labels: {{app: pod}}}}
    spec:
      resourceClaims:
      - name: mig-devices
        resourceClaimTemplateName: mig-devices
      containers:{containers}
      tolerations:
      - {{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}
"""


@needs_kubectl
def test_nvidia_gpu_test4_mig_devices_of_one_parent_per_pod(start: Callable[..., Demo]) -> None:
    """The Deployment's controllers (replicaset, resourceclaim) make the pods and their claims."""
    demo = start(NVIDIA_TOPOLOGY)
    demo.apply("gpu-test4", GPU_TEST4_TEMPLATE + "---" + _gpu_test4_deployment(4))

    def replicas() -> list[str]:
        listed = demo.core.list_namespaced_pod("gpu-test4", label_selector="app=pod")
        return sorted(pod.metadata.name for pod in listed.items)

    first = wait_until(replicas, lambda names: len(names) == 4, "the Deployment's 4 pods")
    published = demo.slice_devices(NVIDIA)
    parents = []
    for name in first:
        pod = demo.running("gpu-test4", name)
        assert pod["spec"]["nodeName"] == "gpu-node-mig"
        claim = demo.generated_claim("gpu-test4", name, "mig-devices")
        _assert_generated(claim, pod, "mig-devices")
        results = _results(claim)
        assert [r["request"] for r in results] == GPU_TEST4_REQUESTS
        attributes = [published[(r["pool"], r["device"])]["attributes"] for r in results]
        assert [a["profile"]["string"] for a in attributes] == [
            "1g.10gb",
            "1g.10gb",
            "2g.20gb",
            "3g.40gb",
        ]
        assert len({r["device"] for r in results}) == 4
        [parent] = {a["parentUUID"]["string"] for a in attributes}  # matchAttribute held
        parents.append(parent)
    assert len(set(parents)) == 4  # each replica filled a GPU of its own

    # A fifth replica finds no GPU with four free MIG devices: Pending, Unschedulable.
    demo.kubectl("-n", "gpu-test4", "scale", "deployment/pod", "--replicas=5")
    [fifth] = set(wait_until(replicas, lambda names: len(names) == 5, "a fifth pod")) - set(first)
    condition = demo.not_scheduled("gpu-test4", fifth)
    assert condition["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in condition["message"]
    [event, *_] = demo.events("gpu-test4", fifth, "FailedScheduling")
    assert event["type"] == "Warning"
    assert "cannot allocate all claims" in event["message"]
    pod = demo.pod("gpu-test4", fifth)
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")


# The opaque GpuConfig of NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test5.yaml and
# gpu-test-mps.yaml: the allocator ignores it, the API server keeps it, and the scheduler copies
# it into status.allocation.devices.config (source FromClaim) for the kubelet plugin.
TIME_SLICING = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
}
MPS = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "GpuConfig",
    "sharing": {
        "strategy": "MPS",
        "mpsConfig": {
            "defaultActiveThreadPercentage": 50,
            "defaultPinnedDeviceMemoryLimit": "10Gi",
        },
    },
}


def _nbody(name: str, request: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04",
        "command": ["bash", "-c"],
        "args": ["trap 'exit 0' TERM; /tmp/sample --benchmark --numbodies=4226000 & wait"],
        "resources": {"claims": [{"name": "shared-gpus", "request": request}]},
    }


# NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test5.yaml: one template with two
# GPU requests, one time-sliced and one under MPS, each shared by two containers of one pod.
def test_nvidia_gpu_test5_time_slicing_and_mps_config(start: Callable[..., Demo]) -> None:
    demo = start(NVIDIA_TOPOLOGY)
    demo.core.create_namespace({"metadata": {"name": "gpu-test5"}})
    demo.resource.create_namespaced_resource_claim_template(
        "gpu-test5",
        {
            "metadata": {"name": "multiple-gpus"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "ts-gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                            {"name": "mps-gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                        ],
                        "config": [
                            {
                                "requests": ["ts-gpu"],
                                "opaque": {"driver": NVIDIA, "parameters": TIME_SLICING},
                            },
                            {
                                "requests": ["mps-gpu"],
                                "opaque": {"driver": NVIDIA, "parameters": MPS},
                            },
                        ],
                    }
                }
            },
        },
    )
    demo.core.create_namespaced_pod(
        "gpu-test5",
        {
            "metadata": {"name": "pod0"},
            "spec": {
                "containers": [
                    _nbody("ts-ctr0", "ts-gpu"),
                    _nbody("ts-ctr1", "ts-gpu"),
                    _nbody("mps-ctr0", "mps-gpu"),
                    _nbody("mps-ctr1", "mps-gpu"),
                ],
                "resourceClaims": [
                    {"name": "shared-gpus", "resourceClaimTemplateName": "multiple-gpus"}
                ],
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
        },
    )
    pod = demo.running("gpu-test5", "pod0")
    claim = demo.generated_claim("gpu-test5", "pod0", "shared-gpus")
    _assert_generated(claim, pod, "shared-gpus")
    results = _results(claim)
    assert [r["request"] for r in results] == ["ts-gpu", "mps-gpu"]
    assert len({r["device"] for r in results}) == 2  # two GPUs
    assert claim["status"]["allocation"]["devices"]["config"] == [
        {
            "source": "FromClaim",
            "requests": ["ts-gpu"],
            "opaque": {"driver": NVIDIA, "parameters": TIME_SLICING},
        },
        {
            "source": "FromClaim",
            "requests": ["mps-gpu"],
            "opaque": {"driver": NVIDIA, "parameters": MPS},
        },
    ]
    # The claim's spec keeps the parameters as written.
    assert claim["spec"]["devices"]["config"][1]["opaque"]["parameters"] == MPS


# NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test-mps.yaml: two containers of one
# pod sharing one GPU under MPS.
GPU_TEST_MPS = """
apiVersion: v1
kind: Namespace
metadata: {name: gpu-test-mps}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: gpu-test-mps, name: shared-gpu}
spec:
  spec:
    devices:
      requests:
      - name: mps-gpu
        exactly: {deviceClassName: gpu.nvidia.com}
      config:
      - requests: ["mps-gpu"]
        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing:
              strategy: MPS
              mpsConfig:
                defaultActiveThreadPercentage: 50
                defaultPinnedDeviceMemoryLimit: 10Gi
---
apiVersion: v1
kind: Pod
metadata:
  namespace: gpu-test-mps
  name: test-pod
  labels: {app: pod}
spec:
  containers:
  - name: mps-ctr0
    image: nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04
    resources:
      claims: [{name: shared-gpu, request: mps-gpu}]
  - name: mps-ctr1
    image: nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04
    resources:
      claims: [{name: shared-gpu, request: mps-gpu}]
  resourceClaims:
  - name: shared-gpu
    resourceClaimTemplateName: shared-gpu
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
"""


@needs_kubectl
def test_nvidia_gpu_test_mps_config_reaches_the_allocation(start: Callable[..., Demo]) -> None:
    demo = start(NVIDIA_TOPOLOGY)
    demo.apply("gpu-test-mps", GPU_TEST_MPS)
    pod = demo.running("gpu-test-mps", "test-pod")
    claim = demo.generated_claim("gpu-test-mps", "test-pod", "shared-gpu")
    _assert_generated(claim, pod, "shared-gpu")
    [result] = _results(claim)
    assert result["request"] == "mps-gpu"
    assert claim["status"]["allocation"]["devices"]["config"] == [
        {
            "source": "FromClaim",
            "requests": ["mps-gpu"],
            "opaque": {"driver": NVIDIA, "parameters": MPS},
        }
    ]


# NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test6.yaml: a template whose selector
# wants an A100 with an even `index`, time-sliced, in a Deployment of 4 replicas (created here
# as the ReplicaSet's pods). The driver has not published `index` since v25.8.0 (commit
# 36fc80ab, "Remove GPU index for CDI spec generation / attribute advertisement"), so on a
# current cluster the A100s make the selector a CEL runtime error ("no such key"), which the
# scheduler reports as an error, not as "no match": the pods stay Pending, claims unallocated.
GPU_TEST6_SELECTOR = """device.attributes['gpu.nvidia.com'].productName.lowerAscii()
.matches('^.*a100.*$')
&&
(device.attributes['gpu.nvidia.com'].index == 0 ||
device.attributes['gpu.nvidia.com'].index == 2 ||
device.attributes['gpu.nvidia.com'].index == 4 ||
device.attributes['gpu.nvidia.com'].index == 6)
"""


def test_nvidia_gpu_test6_index_selector_is_a_cel_runtime_error(
    start: Callable[..., Demo],
) -> None:
    demo = start(NVIDIA_TOPOLOGY)
    demo.core.create_namespace({"metadata": {"name": "gpu-test6"}})
    demo.resource.create_namespaced_resource_claim_template(
        "gpu-test6",
        {
            "metadata": {"name": "a100"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": "gpu.nvidia.com",
                                    "selectors": [{"cel": {"expression": GPU_TEST6_SELECTOR}}],
                                },
                            }
                        ],
                        "config": [
                            {
                                "requests": ["gpu"],
                                "opaque": {"driver": NVIDIA, "parameters": TIME_SLICING},
                            }
                        ],
                    }
                }
            },
        },
    )
    replicas = [f"pod-5f6c7d8b9-{suffix}" for suffix in ("a1b2c", "d3e4f", "g5h6j", "k7l8m")]
    for name in replicas:
        demo.core.create_namespaced_pod(
            "gpu-test6",
            {
                "metadata": {"name": name, "labels": {"app": "pod"}},
                "spec": {
                    "containers": [
                        {
                            "name": "ctr",
                            "image": "ubuntu:22.04",
                            "resources": {"claims": [{"name": "a100"}]},
                        }
                    ],
                    "resourceClaims": [{"name": "a100", "resourceClaimTemplateName": "a100"}],
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                },
            },
        )
    for name in replicas:
        condition = demo.not_scheduled("gpu-test6", name)
        assert condition["reason"] == "SchedulerError", condition
        assert "CEL runtime error" in condition["message"]
        assert "index" in condition["message"]
        [event, *_] = demo.events("gpu-test6", name, "FailedScheduling")
        assert "CEL runtime error" in event["message"]
        claim = demo.generated_claim("gpu-test6", name, "a100")
        assert not (claim.get("status") or {}).get("allocation")
        assert demo.pod("gpu-test6", name)["status"]["phase"] == "Pending"


# -- kubernetes-sigs/dra-example-driver ---------------------------------------------------------

EXAMPLE_NODE = "dra-example-driver-cluster-worker"


def _example_slice(node: str, gpus: int = 8) -> dict[str, Any]:
    """The gpu profile's slice for one node with the default NUM_DEVICES=8
    (internal/profiles/gpu/gpu.go): gpu-<i> with index, uuid, model and driverVersion,
    memory 80Gi and compute 100; pool named after the node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{EXAMPLE}-x7k2p"},
        "spec": {
            "driver": EXAMPLE,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{index}",
                    "attributes": {
                        "index": {"int": index},
                        "uuid": {"string": f"gpu-{index:08x}-5d1e-4c2b-9a7f-{node[-4:]}"},
                        "model": {"string": "LATEST-GPU-MODEL"},
                        "driverVersion": {"version": "1.0.0"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}, "compute": {"value": "100"}},
                }
                for index in range(gpus)
            ],
        },
    }


EXAMPLE_TOPOLOGY: dict[str, Any] = {
    "nodes": [{"name": EXAMPLE_NODE, "cpu": "16", "memory": "64Gi"}],
    # deployments/helm/dra-example-driver/templates/deviceclass.yaml
    "deviceClasses": [{"name": EXAMPLE, "selectors": [f"device.driver == '{EXAMPLE}'"]}],
}


def _example(start: Callable[..., Demo], gpus: int = 8) -> Demo:
    demo = start(EXAMPLE_TOPOLOGY)
    demo.resource.create_resource_slice(_example_slice(EXAMPLE_NODE, gpus))
    return demo


def _example_pod(namespace: str, name: str, claims: dict[str, str], **spec: Any) -> str:
    """A pod of the examples' shape: ctr0 with every pod claim; `claims` maps a pod claim name
    to `template:<name>` or `claim:<name>`."""
    entries = "".join(
        f"\n  - name: {claim}\n    "
        + (
            f"resourceClaimTemplateName: {source[9:]}"
            if source.startswith("template:")
            else f"resourceClaimName: {source[6:]}"
        )
        for claim, source in claims.items()
    )
    names = ", ".join(f"{{name: {claim}}}" for claim in claims)
    return f"""
apiVersion: v1
kind: Pod
metadata:
  namespace: {namespace}
  name: {name}
  labels: {{app: pod}}
spec:
  containers:
  - name: ctr0
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["export; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims: [{names}]
  resourceClaims:{entries}
"""


SINGLE_GPU_TEMPLATE = """
apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{namespace: {namespace}, name: single-gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: gpu.example.com}}
"""


# kubernetes-sigs/dra-example-driver demo/examples/basic-resourceclaimtemplate/
# basic-resourceclaimtemplate.yaml: two pods, one template: a distinct GPU each.
@needs_kubectl
def test_example_basic_resourceclaimtemplate(start: Callable[..., Demo]) -> None:
    demo = _example(start)
    ns = "basic-resourceclaimtemplate"
    demo.apply(
        ns,
        SINGLE_GPU_TEMPLATE.format(namespace=ns)
        + "---"
        + _example_pod(ns, "pod0", {"gpu": "template:single-gpu"})
        + "---"
        + _example_pod(ns, "pod1", {"gpu": "template:single-gpu"}),
    )
    devices = []
    for name in ("pod0", "pod1"):
        pod = demo.running(ns, name)
        assert pod["spec"]["nodeName"] == EXAMPLE_NODE
        claim = demo.generated_claim(ns, name, "gpu")
        _assert_generated(claim, pod, "gpu")
        [device] = _devices(claim)
        assert device[:2] == (EXAMPLE, EXAMPLE_NODE)
        devices.append(device)
    assert devices[0] != devices[1]
    # Deleting a pod deletes its claim (owner) and frees its GPU.
    demo.kubectl("delete", "pod", "-n", ns, "pod0", "--wait=false")
    wait_until(
        lambda: len(demo.resource.list_namespaced_resource_claim(ns).items),
        lambda n: n == 1,
        "pod0's claim deleted with it",
    )


# kubernetes-sigs/dra-example-driver demo/examples/basic-shared-claim-across-containers/
# basic-shared-claim-across-containers.yaml: two containers, one template claim, one GPU.
def test_example_shared_claim_across_containers(start: Callable[..., Demo]) -> None:
    demo = _example(start)
    ns = "basic-shared-claim-across-containers"
    demo.create(SINGLE_GPU_TEMPLATE.format(namespace=ns))
    container = {
        "image": "ubuntu:22.04",
        "command": ["bash", "-c"],
        "args": ["export; trap 'exit 0' TERM; sleep 9999 & wait"],
        "resources": {"claims": [{"name": "shared-gpu"}]},
    }
    demo.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "pod0"},
            "spec": {
                "containers": [{"name": "ctr0", **container}, {"name": "ctr1", **container}],
                "resourceClaims": [
                    {"name": "shared-gpu", "resourceClaimTemplateName": "single-gpu"}
                ],
            },
        },
    )
    pod = demo.running(ns, "pod0")
    claim = demo.generated_claim(ns, "pod0", "shared-gpu")
    _assert_generated(claim, pod, "shared-gpu")
    assert len(_devices(claim)) == 1


# kubernetes-sigs/dra-example-driver demo/examples/basic-shared-claim-across-pods/
# basic-shared-claim-across-pods.yaml: one ResourceClaim, two pods, one GPU reserved for both.
@needs_kubectl
def test_example_shared_claim_across_pods(start: Callable[..., Demo]) -> None:
    demo = _example(start)
    ns = "basic-shared-claim-across-pods"
    manifests = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{namespace: {ns}, name: single-gpu}}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {{deviceClassName: gpu.example.com}}
---{_example_pod(ns, "pod0", {"shared-gpu": "claim:single-gpu"})}
---{_example_pod(ns, "pod1", {"shared-gpu": "claim:single-gpu"})}
"""
    demo.apply(ns, manifests)
    for name in ("pod0", "pod1"):
        demo.running(ns, name)
    claim = demo.allocated(ns, "single-gpu")
    assert _reserved_for(claim) == [("pods", "pod0"), ("pods", "pod1")]
    assert len(_devices(claim)) == 1
    # The claim stays when one pod goes, reserved for the other only.
    demo.kubectl("delete", "pod", "-n", ns, "pod0")
    claim = wait_until(
        lambda: demo.claim(ns, "single-gpu"),
        lambda c: _reserved_for(c) == [("pods", "pod1")],
        "reservedFor without pod0",
    )
    assert len(_devices(claim)) == 1


# kubernetes-sigs/dra-example-driver demo/examples/basic-multiple-requests/
# basic-multiple-requests.yaml: one template with two requests, so the pod's one claim holds
# two distinct GPUs.
def test_example_basic_multiple_requests(start: Callable[..., Demo]) -> None:
    demo = _example(start)
    ns = "basic-multiple-requests"
    demo.create(
        f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{namespace: {ns}, name: multiple-gpus}}
spec:
  spec:
    devices:
      requests:
      - name: gpu-1
        exactly: {{deviceClassName: gpu.example.com}}
      - name: gpu-2
        exactly: {{deviceClassName: gpu.example.com}}
---{_example_pod(ns, "pod0", {"gpus": "template:multiple-gpus"})}
"""
    )
    pod = demo.running(ns, "pod0")
    claim = demo.generated_claim(ns, "pod0", "gpus")
    _assert_generated(claim, pod, "gpus")
    results = _results(claim)
    assert [r["request"] for r in results] == ["gpu-1", "gpu-2"]
    assert results[0]["device"] != results[1]["device"]


# kubernetes-sigs/dra-example-driver demo/examples/basic-resourceclaim-opaque-config/
# basic-resourceclaim-opaque-config.yaml: two GPUs, one TimeSlicing and one SpacePartitioning
# by opaque GpuConfig, each shared by two containers.
def test_example_opaque_config_copied_into_allocation(start: Callable[..., Demo]) -> None:
    demo = _example(start)
    ns = "basic-resourceclaim-opaque-config"
    time_slicing = {
        "apiVersion": "gpu.resource.example.com/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    }
    space_partitioning = {
        "apiVersion": "gpu.resource.example.com/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {
            "strategy": "SpacePartitioning",
            "spacePartitioningConfig": {"partitionCount": 10},
        },
    }
    demo.core.create_namespace({"metadata": {"name": ns}})
    demo.resource.create_namespaced_resource_claim_template(
        ns,
        {
            "metadata": {"name": "multiple-gpus"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "ts-gpu", "exactly": {"deviceClassName": EXAMPLE}},
                            {"name": "sp-gpu", "exactly": {"deviceClassName": EXAMPLE}},
                        ],
                        "config": [
                            {
                                "requests": ["ts-gpu"],
                                "opaque": {"driver": EXAMPLE, "parameters": time_slicing},
                            },
                            {
                                "requests": ["sp-gpu"],
                                "opaque": {"driver": EXAMPLE, "parameters": space_partitioning},
                            },
                        ],
                    }
                }
            },
        },
    )
    containers = [
        {
            "name": name,
            "image": "ubuntu:22.04",
            "resources": {"claims": [{"name": "shared-gpus", "request": request}]},
        }
        for name, request in (
            ("ts-ctr0", "ts-gpu"),
            ("ts-ctr1", "ts-gpu"),
            ("sp-ctr0", "sp-gpu"),
            ("sp-ctr1", "sp-gpu"),
        )
    ]
    demo.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "pod0"},
            "spec": {
                "containers": containers,
                "resourceClaims": [
                    {"name": "shared-gpus", "resourceClaimTemplateName": "multiple-gpus"}
                ],
            },
        },
    )
    demo.running(ns, "pod0")
    claim = demo.generated_claim(ns, "pod0", "shared-gpus")
    results = _results(claim)
    assert [r["request"] for r in results] == ["ts-gpu", "sp-gpu"]
    assert results[0]["device"] != results[1]["device"]
    assert claim["status"]["allocation"]["devices"]["config"] == [
        {
            "source": "FromClaim",
            "requests": ["ts-gpu"],
            "opaque": {"driver": EXAMPLE, "parameters": time_slicing},
        },
        {
            "source": "FromClaim",
            "requests": ["sp-gpu"],
            "opaque": {"driver": EXAMPLE, "parameters": space_partitioning},
        },
    ]


# kubernetes-sigs/dra-example-driver demo/examples/cel-selector/cel-selector.yaml: a model
# attribute and a memory capacity selector, both met by every GPU of the gpu profile.
def test_example_cel_selector(start: Callable[..., Demo]) -> None:
    demo = _example(start)
    ns = "cel-selector"
    demo.create(
        f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{namespace: {ns}, name: single-gpu-cel}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.example.com
          selectors:
          - cel:
              expression: "device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL'"
          - cel:
              expression: >-
                device.capacity['gpu.example.com'].memory.compareTo(quantity('4Gi')) >= 0
---{_example_pod(ns, "pod0", {"gpu": "template:single-gpu-cel"})}
"""
    )
    demo.running(ns, "pod0")
    [device] = _devices(demo.generated_claim(ns, "pod0", "gpu"))
    assert device[0] == EXAMPLE


# kubernetes-sigs/dra-example-driver demo/examples/prioritized-alternatives/
# prioritized-alternatives.yaml: firstAvailable. pod0's first two subrequests match no device
# (no BLEEDING-EDGE-GPU model, no 1Ti GPU), so it gets `gpu/older-gpu`; pod1's first choice
# matches, so it gets `gpu/latest-gpu`.
def test_example_prioritized_alternatives(start: Callable[..., Demo]) -> None:
    demo = _example(start)
    ns = "prioritized-alternatives"
    demo.create(
        f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{namespace: {ns}, name: prioritized-gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        firstAvailable:
        - name: bleeding-edge-gpu
          deviceClassName: gpu.example.com
          selectors:
          - cel:
              expression: "device.attributes['gpu.example.com'].model == 'BLEEDING-EDGE-GPU'"
        - name: huge-gpu
          deviceClassName: gpu.example.com
          selectors:
          - cel:
              expression: >-
                device.capacity['gpu.example.com'].memory.compareTo(quantity('1Ti')) >= 0
        - name: older-gpu
          deviceClassName: gpu.example.com
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{namespace: {ns}, name: preferred-gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        firstAvailable:
        - name: latest-gpu
          deviceClassName: gpu.example.com
          selectors:
          - cel:
              expression: "device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL'"
        - name: older-gpu
          deviceClassName: gpu.example.com
---{_example_pod(ns, "pod0", {"gpu": "template:prioritized-gpu"})}
---{_example_pod(ns, "pod1", {"gpu": "template:preferred-gpu"})}
"""
    )
    chosen = {}
    for name in ("pod0", "pod1"):
        demo.running(ns, name)
        [result] = _results(demo.generated_claim(ns, name, "gpu"))
        chosen[name] = result["request"]
    assert chosen == {"pod0": "gpu/older-gpu", "pod1": "gpu/latest-gpu"}


# kubernetes-sigs/dra-example-driver demo/examples/initcontainer-shared-gpu/
# initcontainer-shared-gpu.yaml: an init container and the main container name the same
# template claim; the init container runs to completion, then the pod runs on that one GPU.
def test_example_initcontainer_shared_gpu(start: Callable[..., Demo]) -> None:
    demo = _example(start)
    ns = "initcontainer-shared-gpu"
    demo.create(
        SINGLE_GPU_TEMPLATE.format(namespace=ns)
        + f"""---
apiVersion: v1
kind: Pod
metadata: {{namespace: {ns}, name: pod0}}
spec:
  initContainers:
  - name: init0
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["export"]
    resources:
      claims: [{{name: shared-gpu}}]
  containers:
  - name: ctr0
    image: ubuntu:22.04
    command: ["bash", "-c"]
    args: ["export; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims: [{{name: shared-gpu}}]
  resourceClaims:
  - name: shared-gpu
    resourceClaimTemplateName: single-gpu
"""
    )
    pod = demo.running(ns, "pod0")
    [init] = pod["status"]["initContainerStatuses"]
    assert init["name"] == "init0"
    assert init["state"]["terminated"]["exitCode"] == 0
    claim = demo.generated_claim(ns, "pod0", "shared-gpu")
    _assert_generated(claim, pod, "shared-gpu")
    assert len(_devices(claim)) == 1


# A request that cannot be met: the basic-resourceclaimtemplate shape with a ninth pod on a node
# whose driver publishes eight GPUs (the gpu profile's default NUM_DEVICES).
def test_example_ninth_pod_on_eight_gpus_is_unschedulable(start: Callable[..., Demo]) -> None:
    demo = _example(start)
    ns = "basic-resourceclaimtemplate"
    demo.create(SINGLE_GPU_TEMPLATE.format(namespace=ns))
    names = [f"pod{number}" for number in range(9)]
    for name in names:
        demo.create(_example_pod(ns, name, {"gpu": "template:single-gpu"}))

    # Eight run, whichever the scheduler took first (the claim controller makes their claims
    # in its own order), and one is left out.
    def placed() -> list[str] | None:
        running = [n for n in names if demo.pod(ns, n)["status"].get("phase") == "Running"]
        return running if len(running) == 8 else None

    running = wait_until(placed, lambda found: found is not None, "eight pods Running")
    assert running is not None
    devices = set()
    for name in running:
        devices.update(_devices(demo.generated_claim(ns, name, "gpu")))
    assert len(devices) == 8
    [left_out] = sorted(set(names) - set(running))
    condition = demo.not_scheduled(ns, left_out)
    assert condition["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in condition["message"]
    assert demo.events(ns, left_out, "FailedScheduling")
    # Its claim exists (the controller made it) but holds nothing.
    claim = demo.generated_claim(ns, left_out, "gpu")
    assert not (claim.get("status") or {}).get("allocation")


# -- Kubernetes documentation ---------------------------------------------------------------------

DOCS_DRIVER = "driver.example.com"


def _docs_slice(driver: str, node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


# kubernetes/website content/en/docs/tasks/configure-pod-container/assign-resources/
# allocate-devices-dra.md with content/en/examples/dra/deviceclass.yaml (published there as
# resource.k8s.io/v1beta2; written here as v1, see the report), resourceclaimtemplate.yaml,
# resourceclaim.yaml (allocationMode All) and dra-example-job.yaml (a Job whose pod template
# names both; the controller-manager's Job controller makes its pods). The shared claim takes
# every `type == "gpu"`, 64Gi device of the node, so the template claim asking one more with
# the same selector cannot be met: the pods stay Pending, Unschedulable.
DOCS_CLAIMS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: example-device-class}
spec:
  selectors:
  - cel:
      expression: |-
        device.driver == "driver.example.com"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: example-resource-claim-template, namespace: dra-docs}
spec:
  spec:
    devices:
      requests:
      - name: gpu-claim
        exactly:
          deviceClassName: example-device-class
          selectors:
          - cel:
              expression: |-
                device.attributes["driver.example.com"].type == "gpu" &&
                device.capacity["driver.example.com"].memory == quantity("64Gi")
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: example-resource-claim, namespace: dra-docs}
spec:
  devices:
    requests:
    - name: single-gpu-claim
      exactly:
        deviceClassName: example-device-class
        allocationMode: All
        selectors:
        - cel:
            expression: |-
              device.attributes["driver.example.com"].type == "gpu" &&
              device.capacity["driver.example.com"].memory == quantity("64Gi")
"""


def _docs_job(claim_template: str = "example-resource-claim-template") -> dict:
    """dra-example-job.yaml: two pods at a time, each with a claim of its own from the template
    and the shared claim, its three containers as the docs split them."""

    def container(number: int, claim: str) -> dict[str, Any]:
        return {
            "name": f"container{number}",
            "image": "ubuntu:24.04",
            "command": ["sleep", "9999"],
            "resources": {"claims": [{"name": claim}]},
        }

    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "example-dra-job", "namespace": "dra-docs"},
        "spec": {
            "completions": 10,
            "parallelism": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        container(0, "separate-gpu-claim"),
                        container(1, "shared-gpu-claim"),
                        container(2, "shared-gpu-claim"),
                    ],
                    "resourceClaims": [
                        {"name": "separate-gpu-claim", "resourceClaimTemplateName": claim_template},
                        {"name": "shared-gpu-claim", "resourceClaimName": "example-resource-claim"},
                    ],
                }
            },
        },
    }


def _job_pods(demo: Demo) -> list[str]:
    """The Job's two pods, once its controller has made them."""

    def names() -> list[str]:
        listed = demo.core.list_namespaced_pod(
            "dra-docs", label_selector="job-name=example-dra-job"
        )
        return sorted(pod.metadata.name for pod in listed.items)

    return wait_until(names, lambda found: len(found) == 2, "the Job's two pods")


def _docs_gpu(name: str, memory: str = "64Gi") -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"type": {"string": "gpu"}},
        "capacity": {"memory": {"value": memory}},
    }


@needs_kubectl
def test_docs_all_mode_claim_leaves_no_device_for_the_template(
    start: Callable[..., Demo],
) -> None:
    demo = start({"nodes": [{"name": "docs-node", "cpu": "16", "memory": "64Gi"}]})
    demo.resource.create_resource_slice(
        _docs_slice(DOCS_DRIVER, "docs-node", [_docs_gpu(f"gpu-{i}") for i in range(4)])
    )
    demo.core.create_namespace({"metadata": {"name": "dra-docs"}})
    out = demo.apply("dra-docs", DOCS_CLAIMS)
    assert "deviceclass.resource.k8s.io/example-device-class created" in out
    demo.create(yaml.safe_dump(_docs_job()))
    # The Job's parallelism is 2: two pods at a time.
    for name in _job_pods(demo):
        condition = demo.not_scheduled("dra-docs", name)
        assert condition["reason"] == "Unschedulable"
        assert "cannot allocate all claims" in condition["message"]
        assert demo.events("dra-docs", name, "FailedScheduling")
        # The template claim was created for the pod all the same.
        claim = demo.generated_claim("dra-docs", name, "separate-gpu-claim")
        assert claim["metadata"]["annotations"][POD_CLAIM_NAME] == "separate-gpu-claim"
    shared = demo.claim("dra-docs", "example-resource-claim")
    assert not (shared.get("status") or {}).get("allocation")


def test_docs_all_mode_claim_shared_with_a_template_of_another_device(
    start: Callable[..., Demo],
) -> None:
    """The same docs manifests, but the template's selector asks 32Gi (adapted here) and the
    node has two GPUs of each size: the shared All claim takes both 64Gi GPUs, each Job pod
    gets a 32Gi GPU through its own template claim, and both pods reserve the shared claim."""
    demo = start({"nodes": [{"name": "docs-node", "cpu": "16", "memory": "64Gi"}]})
    demo.resource.create_resource_slice(
        _docs_slice(
            DOCS_DRIVER,
            "docs-node",
            [
                _docs_gpu("gpu-0"),
                _docs_gpu("gpu-1"),
                _docs_gpu("gpu-2", "32Gi"),
                _docs_gpu("gpu-3", "32Gi"),
            ],
        )
    )
    demo.core.create_namespace({"metadata": {"name": "dra-docs"}})
    demo.create(DOCS_CLAIMS)
    # The docs' template with the memory the remaining GPUs have.
    demo.create(
        DOCS_CLAIMS.split("---")[1]
        .replace("example-resource-claim-template", "small-gpu-template")
        .replace('quantity("64Gi")', 'quantity("32Gi")')
    )
    demo.create(yaml.safe_dump(_docs_job("small-gpu-template")))
    pods = _job_pods(demo)
    separate = []
    for name in pods:
        demo.running("dra-docs", name)
        separate.extend(_devices(demo.generated_claim("dra-docs", name, "separate-gpu-claim")))
    assert sorted(d[2] for d in separate) == ["gpu-2", "gpu-3"]
    shared = demo.allocated("dra-docs", "example-resource-claim")
    assert sorted(d[2] for d in _devices(shared)) == ["gpu-0", "gpu-1"]
    assert {r["request"] for r in _results(shared)} == {"single-gpu-claim"}
    assert _reserved_for(shared) == [("pods", p) for p in pods]


# kubernetes/website content/en/docs/tutorials/cluster-management/install-use-dra.md with
# content/en/examples/dra/driver-install/example/resourceclaim.yaml and pod.yaml: the tutorial
# installs dra-example-driver; a claim asking a GPU with at least 10Gi, a pod using it.
@needs_kubectl
def test_docs_tutorial_claim_and_pod(start: Callable[..., Demo]) -> None:
    demo = _example(start)
    demo.kubectl("create", "namespace", "dra-tutorial")
    demo.apply(
        "tutorial",
        """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: some-gpu, namespace: dra-tutorial}
spec:
  devices:
    requests:
    - name: some-gpu
      exactly:
        deviceClassName: gpu.example.com
        selectors:
        - cel:
            expression: "device.capacity['gpu.example.com'].memory.compareTo(quantity('10Gi')) >= 0"
---
apiVersion: v1
kind: Pod
metadata:
  name: pod0
  namespace: dra-tutorial
  labels: {app: pod}
spec:
  containers:
  - name: ctr0
    image: ubuntu:24.04
    command: ["bash", "-c"]
    args: ["export; trap 'exit 0' TERM; sleep 9999 & wait"]
    resources:
      claims: [{name: gpu}]
  resourceClaims:
  - name: gpu
    resourceClaimName: some-gpu
""",
    )
    demo.running("dra-tutorial", "pod0")
    claim = demo.allocated("dra-tutorial", "some-gpu")
    assert _reserved_for(claim) == [("pods", "pod0")]
    [result] = _results(claim)
    assert (result["request"], result["driver"], result["pool"]) == (
        "some-gpu",
        EXAMPLE,
        EXAMPLE_NODE,
    )
    table = demo.kubectl("get", "resourceclaim", "-n", "dra-tutorial", "some-gpu", "--no-headers")
    assert table.split()[:2] == ["some-gpu", "allocated,reserved"]
    # The tutorial's clean-up: deleting the pod deallocates the claim, which stays.
    demo.kubectl("delete", "pod", "-n", "dra-tutorial", "pod0")
    claim = wait_until(
        lambda: demo.claim("dra-tutorial", "some-gpu"),
        lambda c: not (c.get("status") or {}).get("allocation"),
        "some-gpu deallocated",
    )
    assert not claim["status"].get("reservedFor")


# kubernetes/website content/en/docs/concepts/scheduling-eviction/dynamic-resource-allocation.md,
# "Prioritized list": a template asking one large black device, or else two small white ones
# (driver resource-driver.example.com, class resource.example.com); the pod is written here.
PRIORITIZED_TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: resource.example.com}
spec:
  selectors:
  - cel: {expression: 'device.driver == "resource-driver.example.com"'}
---
apiVersion: v1
kind: Namespace
metadata: {name: prioritized}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: prioritized-list-claim-template, namespace: prioritized}
spec:
  spec:
    devices:
      requests:
      - name: req-0
        firstAvailable:
        - name: large-black
          deviceClassName: resource.example.com
          selectors:
          - cel:
              expression: |-
                device.attributes["resource-driver.example.com"].color == "black" &&
                device.attributes["resource-driver.example.com"].size == "large"
        - name: small-white
          deviceClassName: resource.example.com
          selectors:
          - cel:
              expression: |-
                device.attributes["resource-driver.example.com"].color == "white" &&
                device.attributes["resource-driver.example.com"].size == "small"
          count: 2
"""


def _cat(name: str, color: str, size: str) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"color": {"string": color}, "size": {"string": size}},
    }


def test_docs_prioritized_list(start: Callable[..., Demo]) -> None:
    demo = start(
        {
            "nodes": [
                {"name": "node-black", "cpu": "16", "memory": "64Gi"},
                {"name": "node-white", "cpu": "16", "memory": "64Gi"},
            ]
        }
    )
    driver = "resource-driver.example.com"
    demo.resource.create_resource_slice(
        _docs_slice(driver, "node-black", [_cat("cat-0", "black", "large")])
    )
    demo.resource.create_resource_slice(
        _docs_slice(
            driver,
            "node-white",
            [_cat("cat-0", "white", "small"), _cat("cat-1", "white", "small")],
        )
    )
    demo.create(PRIORITIZED_TEMPLATE)

    def pod(name: str) -> None:
        demo.core.create_namespaced_pod(
            "prioritized",
            {
                "metadata": {"name": name},
                "spec": {
                    "containers": [
                        {
                            "name": "ctr0",
                            "image": "ubuntu:24.04",
                            "resources": {"claims": [{"name": "cats"}]},
                        }
                    ],
                    "resourceClaims": [
                        {
                            "name": "cats",
                            "resourceClaimTemplateName": "prioritized-list-claim-template",
                        }
                    ],
                },
            },
        )

    # The first pod gets the large black device: the node offering the first choice wins.
    pod("pod-0")
    assert demo.running("prioritized", "pod-0")["spec"]["nodeName"] == "node-black"
    results = _results(demo.generated_claim("prioritized", "pod-0", "cats"))
    assert [(r["request"], r["pool"], r["device"]) for r in results] == [
        ("req-0/large-black", "node-black", "cat-0")
    ]
    # With it taken, the next pod falls back to two small white devices.
    pod("pod-1")
    assert demo.running("prioritized", "pod-1")["spec"]["nodeName"] == "node-white"
    results = _results(demo.generated_claim("prioritized", "pod-1", "cats"))
    assert sorted((r["request"], r["device"]) for r in results) == [
        ("req-0/small-white", "cat-0"),
        ("req-0/small-white", "cat-1"),
    ]
    # Neither alternative is left for a third.
    pod("pod-2")
    condition = demo.not_scheduled("prioritized", "pod-2")
    assert condition["reason"] == "Unschedulable"
    assert "cannot allocate all claims" in condition["message"]
