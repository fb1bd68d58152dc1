"""Persistent volumes over HTTP with the official kubernetes client: the simulated provisioner,
the default storage class, WaitForFirstConsumer, reclaim, protection, storage quota, and the
scheduler and kubelet waiting for what a pod mounts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client import ApiException

from simcluster.cluster import SimCluster
from simcluster.tests.conftest import wait_until

NAMESPACE = "team"
DEFAULT_CLASS = {"storageclass.kubernetes.io/is-default-class": "true"}


class Cluster:
    """A fresh two-node cluster per test: storage classes are cluster-wide, and which one is
    the default changes what every claim gets."""

    def __init__(self, sim: SimCluster, api: client.ApiClient) -> None:
        self.sim = sim
        self.core = client.CoreV1Api(api)
        self.storage = client.StorageV1Api(api)

    def storage_class(self, name: str, *, default: bool = False, **fields: Any) -> None:
        metadata: dict[str, Any] = {"name": name}
        if default:
            metadata["annotations"] = dict(DEFAULT_CLASS)
        self.storage.create_storage_class(
            {"metadata": metadata, "provisioner": "rancher.io/local-path", **fields}
        )

    def claim(self, name: str, size: str = "1Gi", **spec: Any) -> Any:
        body = {
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": size}},
                **spec,
            },
        }
        return self.core.create_namespaced_persistent_volume_claim(NAMESPACE, body)

    def read_claim(self, name: str) -> Any:
        return self.core.read_namespaced_persistent_volume_claim(name, NAMESPACE)

    def bound_claim(self, name: str) -> Any:
        return wait_until(
            lambda: self.read_claim(name), lambda c: c.status.phase == "Bound", f"{name} bound"
        )

    def pod(self, name: str, *, volumes: list[dict[str, Any]], **container: Any) -> None:
        self.core.create_namespaced_pod(
            NAMESPACE,
            {
                "metadata": {"name": name},
                "spec": {
                    "containers": [{"name": "main", "image": "busybox:1.36", **container}],
                    "volumes": volumes,
                },
            },
        )

    def read_pod(self, name: str) -> Any:
        return self.core.read_namespaced_pod(name, NAMESPACE)

    def events(self, reason: str) -> list[str]:
        return [
            e.message
            for e in self.core.list_namespaced_event(NAMESPACE).items
            if e.reason == reason
        ]


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[Cluster]:
    with SimCluster(topology={"generate": {"nodes": 2, "gpus_per_node": 1}}) as sim:
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(sim.write_kubeconfig(tmp_path / "kubeconfig")),
            client_configuration=configuration,
        )
        with client.ApiClient(configuration) as api:
            env = Cluster(sim, api)
            env.core.create_namespace({"metadata": {"name": NAMESPACE}})
            yield env


def _claim_volume(claim: str) -> list[dict[str, Any]]:
    return [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]


def _error(exc_info: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return json.loads(exc_info.value.body)


def test_claim_binds_to_a_provisioned_volume_when_its_class_exists(cluster: Cluster) -> None:
    cluster.storage_class("fast", reclaimPolicy="Delete", mountOptions=["noatime"])
    created = cluster.claim("data", "5Gi", storageClassName="fast")
    assert created.status.phase == "Pending"
    assert created.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    assert created.spec.volume_mode == "Filesystem"
    claim = cluster.bound_claim("data")
    assert claim.spec.volume_name == f"pvc-{claim.metadata.uid}"
    assert claim.status.capacity == {"storage": "5Gi"}
    assert claim.status.access_modes == ["ReadWriteOnce"]
    assert claim.metadata.annotations["pv.kubernetes.io/bind-completed"] == "yes"
    assert (
        claim.metadata.annotations["volume.kubernetes.io/storage-provisioner"]
        == "rancher.io/local-path"
    )
    volume = cluster.core.read_persistent_volume(claim.spec.volume_name)
    assert volume.status.phase == "Bound"
    assert volume.spec.claim_ref.name == "data"
    assert volume.spec.claim_ref.namespace == NAMESPACE
    assert volume.spec.claim_ref.uid == claim.metadata.uid
    assert volume.spec.capacity == {"storage": "5Gi"}
    assert volume.spec.storage_class_name == "fast"
    assert volume.spec.persistent_volume_reclaim_policy == "Delete"
    assert volume.spec.mount_options == ["noatime"]
    assert volume.metadata.annotations["pv.kubernetes.io/provisioned-by"] == (
        "rancher.io/local-path"
    )
    assert "Successfully provisioned volume" in cluster.events("ProvisioningSucceeded")[0]


def test_default_class_is_written_into_the_claim_when_it_names_none(cluster: Cluster) -> None:
    cluster.storage_class("older", default=True)
    cluster.storage_class("standard", default=True)
    created = cluster.claim("data")
    assert created.spec.storage_class_name == "standard"
    explicit_empty = cluster.claim("static", storageClassName="")
    assert explicit_empty.spec.storage_class_name == ""
    cluster.bound_claim("data")


def test_claim_stays_pending_without_a_class_then_binds_when_one_appears(
    cluster: Cluster,
) -> None:
    cluster.claim("named", storageClassName="later")
    cluster.claim("unnamed")
    # Each claim's event may come from a different pass of the volume controller.
    wait_until(
        lambda: (cluster.events("ProvisioningFailed"), cluster.events("FailedBinding")),
        lambda events: (
            events
            == (
                ['storageclass.storage.k8s.io "later" not found'],
                ["no persistent volumes available for this claim and no storage class is set"],
            )
        ),
        "the ProvisioningFailed and FailedBinding events",
    )
    time.sleep(0.3)
    assert cluster.read_claim("named").status.phase == "Pending"
    assert cluster.read_claim("unnamed").status.phase == "Pending"
    cluster.storage_class("later")
    cluster.bound_claim("named")
    assert cluster.read_claim("unnamed").status.phase == "Pending"
    cluster.storage_class("standard", default=True)
    # Retroactive default class assignment: the class is written in, then the claim binds.
    claim = cluster.bound_claim("unnamed")
    assert claim.spec.storage_class_name == "standard"


def test_wait_for_first_consumer_binds_on_the_node_the_pod_is_scheduled_to(
    cluster: Cluster,
) -> None:
    cluster.storage_class("local", volumeBindingMode="WaitForFirstConsumer")
    cluster.claim("data", storageClassName="local")
    wait_until(
        lambda: cluster.events("WaitForFirstConsumer"),
        lambda events: events == ["waiting for first consumer to be created before binding"],
        "WaitForFirstConsumer event",
    )
    assert cluster.read_claim("data").status.phase == "Pending"
    cluster.pod("user", volumes=_claim_volume("data"))
    pod = wait_until(
        lambda: cluster.read_pod("user"), lambda p: p.status.phase == "Running", "pod running"
    )
    claim = cluster.bound_claim("data")
    assert claim.metadata.annotations["volume.kubernetes.io/selected-node"] == pod.spec.node_name
    volume = cluster.core.read_persistent_volume(claim.spec.volume_name)
    term = volume.spec.node_affinity.required.node_selector_terms[0]
    assert term.match_expressions[0].key == "kubernetes.io/hostname"
    assert term.match_expressions[0].values == [pod.spec.node_name]
    # A later pod mounting the same volume lands on the volume's node.
    cluster.core.delete_namespaced_pod("user", NAMESPACE)
    cluster.pod("again", volumes=_claim_volume("data"))
    again = wait_until(
        lambda: cluster.read_pod("again"), lambda p: p.spec.node_name, "second pod scheduled"
    )
    assert again.spec.node_name == pod.spec.node_name


def test_pod_stays_pending_when_its_claim_is_missing(cluster: Cluster) -> None:
    cluster.pod("orphan", volumes=_claim_volume("nope"))
    pod = wait_until(
        lambda: cluster.read_pod("orphan"),
        lambda p: any(c.type == "PodScheduled" for c in p.status.conditions or []),
        "PodScheduled condition",
    )
    condition = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert condition.status == "False"
    assert condition.reason == "Unschedulable"
    assert condition.message == (
        '0/2 nodes are available: persistentvolumeclaim "nope" not found. preemption: 0/2 '
        "nodes are available: 2 Preemption is not helpful for scheduling."
    )
    assert pod.spec.node_name is None
    assert condition.message in cluster.events("FailedScheduling")


def test_pod_stays_pending_when_its_immediate_claim_is_unbound_then_runs_once_bound(
    cluster: Cluster,
) -> None:
    cluster.claim("data", storageClassName="later")
    cluster.pod("waiting", volumes=_claim_volume("data"))
    pod = wait_until(
        lambda: cluster.read_pod("waiting"),
        lambda p: any(c.type == "PodScheduled" for c in p.status.conditions or []),
        "PodScheduled condition",
    )
    condition = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert condition.message == (
        "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    cluster.storage_class("later")
    cluster.bound_claim("data")
    wait_until(
        lambda: cluster.read_pod("waiting"), lambda p: p.status.phase == "Running", "running"
    )


def test_deleting_a_claim_deletes_its_volume_when_reclaim_policy_is_delete(
    cluster: Cluster,
) -> None:
    cluster.storage_class("gone")
    cluster.storage_class("kept", reclaimPolicy="Retain")
    deleted = cluster.bound_claim(cluster.claim("a", storageClassName="gone").metadata.name)
    retained = cluster.bound_claim(cluster.claim("b", storageClassName="kept").metadata.name)
    cluster.core.delete_namespaced_persistent_volume_claim("a", NAMESPACE)
    cluster.core.delete_namespaced_persistent_volume_claim("b", NAMESPACE)
    names = lambda: {v.metadata.name for v in cluster.core.list_persistent_volume().items}  # noqa: E731
    wait_until(names, lambda found: deleted.spec.volume_name not in found, "volume deleted")
    volume = wait_until(
        lambda: cluster.core.read_persistent_volume(retained.spec.volume_name),
        lambda v: v.status.phase == "Released",
        "volume released",
    )
    assert volume.spec.claim_ref.name == "b"


def test_claim_in_use_is_removed_only_once_its_pod_is_gone(cluster: Cluster) -> None:
    cluster.storage_class("std")
    cluster.bound_claim(cluster.claim("data", storageClassName="std").metadata.name)
    cluster.pod("user", volumes=_claim_volume("data"))
    wait_until(lambda: cluster.read_pod("user"), lambda p: p.status.phase == "Running", "running")
    cluster.core.delete_namespaced_persistent_volume_claim("data", NAMESPACE)
    time.sleep(0.3)
    terminating = cluster.read_claim("data")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.finalizers == ["kubernetes.io/pvc-protection"]
    cluster.core.delete_namespaced_pod("user", NAMESPACE)

    def gone() -> bool:
        try:
            cluster.read_claim("data")
        except ApiException as error:
            return error.status == 404
        return False

    wait_until(gone, bool, "claim removed")


def test_static_volume_binds_to_a_matching_claim(cluster: Cluster) -> None:
    created = cluster.core.create_persistent_volume(
        {
            "metadata": {"name": "nfs-share"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
                "storageClassName": "",
                "nfs": {"server": "10.0.0.5", "path": "/exports"},
            },
        }
    )
    assert created.spec.persistent_volume_reclaim_policy == "Retain"
    assert created.metadata.finalizers == ["kubernetes.io/pv-protection"]
    wait_until(
        lambda: cluster.core.read_persistent_volume("nfs-share"),
        lambda v: v.status.phase == "Available",
        "volume available",
    )
    cluster.claim("share", "2Gi", storageClassName="", accessModes=["ReadWriteMany"])
    claim = cluster.bound_claim("share")
    assert claim.spec.volume_name == "nfs-share"
    assert claim.status.capacity == {"storage": "10Gi"}


def test_storage_quota_refuses_a_claim_with_the_real_message(cluster: Cluster) -> None:
    cluster.storage_class("std")
    cluster.core.create_namespaced_resource_quota(
        NAMESPACE,
        {
            "metadata": {"name": "storage"},
            "spec": {"hard": {"requests.storage": "10Gi", "persistentvolumeclaims": "2"}},
        },
    )
    cluster.claim("a", "6Gi", storageClassName="std")
    with pytest.raises(ApiException) as exc_info:
        cluster.claim("b", "5Gi", storageClassName="std")
    assert exc_info.value.status == 403
    body = _error(exc_info)
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'persistentvolumeclaims "b" is forbidden: exceeded quota: storage, requested: '
        "requests.storage=5Gi, used: requests.storage=6Gi, limited: requests.storage=10Gi"
    )
    cluster.claim("c", "4Gi", storageClassName="std")
    with pytest.raises(ApiException) as count_info:
        cluster.claim("d", "1Mi", storageClassName="std")
    assert _error(count_info)["message"] == (
        'persistentvolumeclaims "d" is forbidden: exceeded quota: storage, requested: '
        "persistentvolumeclaims=1,requests.storage=1Mi, used: "
        "persistentvolumeclaims=2,requests.storage=10Gi, limited: "
        "persistentvolumeclaims=2,requests.storage=10Gi"
    )
    quota = wait_until(
        lambda: cluster.core.read_namespaced_resource_quota("storage", NAMESPACE),
        lambda q: (q.status.used or {}).get("persistentvolumeclaims") == "2",
        "quota status",
    )
    assert quota.status.used == {"persistentvolumeclaims": "2", "requests.storage": "10Gi"}


def test_count_and_class_quota_keys_are_enforced(cluster: Cluster) -> None:
    cluster.storage_class("std", default=True)
    cluster.core.create_namespaced_resource_quota(
        NAMESPACE,
        {
            "metadata": {"name": "count"},
            "spec": {
                "hard": {
                    "count/persistentvolumeclaims": "5",
                    "std.storageclass.storage.k8s.io/requests.storage": "1Gi",
                }
            },
        },
    )
    cluster.claim("a", "1Gi")
    with pytest.raises(ApiException) as exc_info:
        cluster.claim("b", "1Gi")
    assert _error(exc_info)["message"] == (
        'persistentvolumeclaims "b" is forbidden: exceeded quota: count, requested: '
        "std.storageclass.storage.k8s.io/requests.storage=1Gi, used: "
        "std.storageclass.storage.k8s.io/requests.storage=1Gi, limited: "
        "std.storageclass.storage.k8s.io/requests.storage=1Gi"
    )


def test_expansion_is_refused_unless_the_class_allows_it(cluster: Cluster) -> None:
    cluster.storage_class("fixed")
    cluster.storage_class("growable", allowVolumeExpansion=True)
    cluster.bound_claim(cluster.claim("a", storageClassName="fixed").metadata.name)
    cluster.bound_claim(cluster.claim("b", storageClassName="growable").metadata.name)
    grow = {"spec": {"resources": {"requests": {"storage": "3Gi"}}}}
    with pytest.raises(ApiException) as exc_info:
        cluster.core.patch_namespaced_persistent_volume_claim("a", NAMESPACE, grow)
    assert exc_info.value.status == 403
    assert "only dynamically provisioned pvc can be resized" in _error(exc_info)["message"]
    cluster.core.patch_namespaced_persistent_volume_claim("b", NAMESPACE, grow)
    claim = wait_until(
        lambda: cluster.read_claim("b"),
        lambda c: c.status.capacity == {"storage": "3Gi"},
        "capacity grown",
    )
    volume = cluster.core.read_persistent_volume(claim.spec.volume_name)
    assert volume.spec.capacity == {"storage": "3Gi"}
    with pytest.raises(ApiException) as shrink:
        cluster.core.patch_namespaced_persistent_volume_claim(
            "b", NAMESPACE, {"spec": {"resources": {"requests": {"storage": "1Gi"}}}}
        )
    assert shrink.value.status == 422


def test_pod_waits_in_container_creating_when_a_mounted_secret_is_missing(
    cluster: Cluster,
) -> None:
    cluster.pod(
        "mounts",
        volumes=[
            {"name": "keys", "secret": {"secretName": "ssh-keys"}},
            {"name": "opt", "configMap": {"name": "absent", "optional": True}},
        ],
    )
    pod = wait_until(lambda: cluster.read_pod("mounts"), lambda p: p.spec.node_name, "scheduled")
    pod = wait_until(
        lambda: cluster.read_pod("mounts"), lambda p: p.status.container_statuses, "statuses"
    )
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    assert pod.spec.volumes[0].secret.default_mode == 420
    assert cluster.events("FailedMount") == [
        'MountVolume.SetUp failed for volume "keys" : secret "ssh-keys" not found'
    ]
    cluster.core.create_namespaced_secret(
        NAMESPACE, {"metadata": {"name": "ssh-keys"}, "stringData": {"authorized_keys": "k"}}
    )
    wait_until(lambda: cluster.read_pod("mounts"), lambda p: p.status.phase == "Running", "running")


def test_pod_reports_create_container_config_error_when_an_env_secret_is_missing(
    cluster: Cluster,
) -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}}]
    cluster.pod("envs", volumes=[], env=env)
    pod = wait_until(
        lambda: cluster.read_pod("envs"), lambda p: p.status.container_statuses, "statuses"
    )
    waiting = pod.status.container_statuses[0].state.waiting
    assert waiting.reason == "CreateContainerConfigError"
    assert waiting.message == 'secret "api" not found'
    cluster.core.create_namespaced_secret(
        NAMESPACE, {"metadata": {"name": "api"}, "stringData": {"other": "x"}}
    )
    pod = wait_until(
        lambda: cluster.read_pod("envs"),
        lambda p: p.status.container_statuses[0].state.waiting.message != 'secret "api" not found',
        "new reason",
    )
    assert pod.status.container_statuses[0].state.waiting.message == (
        f"couldn't find key token in Secret {NAMESPACE}/api"
    )
    cluster.core.patch_namespaced_secret("api", NAMESPACE, {"stringData": {"token": "t"}})
    wait_until(lambda: cluster.read_pod("envs"), lambda p: p.status.phase == "Running", "running")
