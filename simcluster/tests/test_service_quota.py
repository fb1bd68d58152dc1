"""ResourceQuota on Services and ephemeral storage, as the kube-apiserver's service and pod
evaluators count them: `services.nodeports` every port of a NodePort or LoadBalancer Service,
`services.loadbalancers` each LoadBalancer Service (on create and on a type change), and
`requests/limits.ephemeral-storage` of pods, which unlike cpu and memory a pod need not set."""

from __future__ import annotations

from typing import Any

import pytest

from simcluster.errors import ApiError
from simcluster.quota import QuotaController, pod_usage, service_usage
from simcluster.store import Store


@pytest.fixture
def store() -> Store:
    store = Store()
    store.create(
        "namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}},
        internal=True,
    )
    QuotaController(store).install()
    return store


def _quota(hard: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-quota", "namespace": "team"},
        "spec": {"hard": hard},
    }


def _service(name: str, service_type: str, ports: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "type": service_type,
            "selector": {"app": name},
            "ports": [{"name": f"p{i}", "port": 8000 + i} for i in range(ports)],
            **spec,
        },
    }


def _pod(name: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}]},
    }


def _used(store: Store) -> dict[str, str]:
    return store.get("resourcequotas", "team", "gpu-quota")["status"]["used"]


@pytest.mark.parametrize(
    ("service_type", "extra", "node_ports", "balancers"),
    [
        ("ClusterIP", {}, 0, 0),
        ("NodePort", {}, 3, 0),
        ("LoadBalancer", {}, 3, 1),
        # Without node ports allocated, only the ports that name one explicitly count.
        ("LoadBalancer", {"allocateLoadBalancerNodePorts": False}, 0, 1),
    ],
)
def test_service_usage_counts_node_ports_and_load_balancers(
    service_type: str, extra: dict, node_ports: int, balancers: int
) -> None:
    usage = {k: str(v) for k, v in service_usage(_service("s", service_type, 3, **extra)).items()}
    assert usage.get("services.nodeports", "0") == str(node_ports)
    assert usage.get("services.loadbalancers", "0") == str(balancers)
    assert usage["services"] == "1"


def test_node_ports_past_the_quota_are_forbidden(store: Store) -> None:
    store.create("resourcequotas", _quota({"services.nodeports": "3"}))
    store.create("services", _service("two", "NodePort", ports=2))
    store.create("services", _service("inside", "ClusterIP", ports=5))  # takes none
    with pytest.raises(ApiError) as raised:
        store.create("services", _service("more", "LoadBalancer", ports=2))
    assert raised.value.code == 403
    assert raised.value.message == (
        'services "more" is forbidden: exceeded quota: gpu-quota, '
        "requested: services.nodeports=2, used: services.nodeports=2, "
        "limited: services.nodeports=3"
    )
    assert _used(store) == {"services.nodeports": "2"}


def test_load_balancers_past_the_quota_are_forbidden(store: Store) -> None:
    store.create("resourcequotas", _quota({"services.loadbalancers": "1"}))
    store.create("services", _service("lb", "LoadBalancer"))
    with pytest.raises(ApiError) as raised:
        store.create("services", _service("lb2", "LoadBalancer"))
    assert "services.loadbalancers=1" in raised.value.message
    store.create("services", _service("np", "NodePort"))  # not a load balancer
    assert _used(store) == {"services.loadbalancers": "1"}


def test_a_type_change_is_charged_on_update(store: Store) -> None:
    store.create("resourcequotas", _quota({"services.nodeports": "1"}))
    store.create("services", _service("grow", "ClusterIP", ports=2))
    service = store.get("services", "team", "grow")
    service["spec"]["type"] = "NodePort"
    with pytest.raises(ApiError) as raised:
        store.update("services", service)
    assert "services.nodeports=2" in raised.value.message
    store.delete("services", "team", "grow")
    assert _used(store) == {"services.nodeports": "0"}


def test_pods_are_charged_their_ephemeral_storage(store: Store) -> None:
    store.create(
        "resourcequotas",
        _quota({"requests.ephemeral-storage": "30Gi", "limits.ephemeral-storage": "30Gi"}),
    )
    disk = {"ephemeral-storage": "20Gi"}
    store.create("pods", _pod("one", {"requests": disk, "limits": disk}))
    assert _used(store) == {
        "requests.ephemeral-storage": "20Gi",
        "limits.ephemeral-storage": "20Gi",
    }
    with pytest.raises(ApiError) as raised:
        store.create("pods", _pod("two", {"limits": disk}))  # requests default to limits
    assert "limits.ephemeral-storage=20Gi,requests.ephemeral-storage=20Gi" in (raised.value.message)


def test_a_pod_need_not_name_ephemeral_storage(store: Store) -> None:
    # The pod evaluator demands explicit values for cpu and memory only (its validationSet:
    # "do not add more resources to this list"): a pod without ephemeral storage counts 0.
    store.create("resourcequotas", _quota({"limits.ephemeral-storage": "1Gi"}))
    store.create("pods", _pod("bare", {}))
    assert _used(store) == {"limits.ephemeral-storage": "0"}
    assert "limits.ephemeral-storage" not in pod_usage(_pod("bare", {}))


def _secret(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "team"},
        "type": "Opaque",
        "data": {"token": "c2VjcmV0"},
    }


def test_secrets_past_the_quota_are_forbidden_and_a_deleted_one_frees_its_place(
    store: Store,
) -> None:
    store.create("resourcequotas", _quota({"count/secrets": "2"}))
    store.create("secrets", _secret("one"))
    store.create("secrets", _secret("two"))
    with pytest.raises(ApiError) as raised:
        store.create("secrets", _secret("three"))
    assert raised.value.code == 403
    assert raised.value.message == (
        'secrets "three" is forbidden: exceeded quota: gpu-quota, '
        "requested: count/secrets=1, used: count/secrets=2, limited: count/secrets=2"
    )
    store.delete("secrets", "team", "one")
    store.create("secrets", _secret("three"))
    assert _used(store) == {"count/secrets": "2"}
