"""ResourceQuota: counting rules, the 403 wording of the admission plugin and
status.used maintenance, against an in-process store."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcluster.errors import ApiError
from simcluster.quota import (
    Quantity,
    QuotaController,
    add_usage,
    claim_usage,
    pod_usage,
)
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


def _quota(hard: dict[str, str], name: str = "gpu-quota") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"hard": hard},
    }


def _claim(
    name: str, *, count: int = 1, mode: str = "ExactCount", device_class: str = "nvidia-h100"
) -> dict:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def _pod(name: str, cpu: str | None = "2", memory: str | None = "8Gi") -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": requests}}
            ]
        },
    }


def _used(store: Store, name: str = "gpu-quota") -> dict[str, str]:
    return store.get("resourcequotas", "team", name)["status"]["used"]


def test_sum_keeps_the_format_of_the_first_quantity() -> None:
    assert str(Quantity.parse("1Gi") + Quantity.parse("512Mi")) == "1536Mi"
    assert str(Quantity.parse("500m") + Quantity.parse("1")) == "1500m"


def test_claim_usage_counts_exact_all_and_first_available_per_class() -> None:
    claim = _claim("c", count=3)
    claim["spec"]["devices"]["requests"] += [
        {"name": "all", "exactly": {"deviceClassName": "nvidia-h100", "allocationMode": "All"}},
        {
            "name": "either",
            "firstAvailable": [
                {"name": "a", "deviceClassName": "nvidia-l40s", "count": 2},
                {"name": "b", "deviceClassName": "nvidia-l40s", "count": 4},
                {"name": "c", "deviceClassName": "nvidia-h100", "count": 1},
            ],
        },
    ]
    usage = {key: str(value) for key, value in claim_usage(claim).items()}
    assert usage == {
        "count/resourceclaims.resource.k8s.io": "1",
        "nvidia-h100.deviceclass.resource.k8s.io/devices": "36",
        "nvidia-l40s.deviceclass.resource.k8s.io/devices": "4",
    }


def test_pod_usage_defaults_requests_from_limits_and_ignores_terminal_pods() -> None:
    pod = _pod("p", cpu=None, memory=None)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "500m", "memory": "1Gi"}}
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}
    ]
    usage = {key: str(value) for key, value in pod_usage(pod).items()}
    assert usage["requests.cpu"] == "2"
    assert usage["requests.memory"] == "1Gi"
    assert usage["limits.cpu"] == "500m"
    assert usage["pods"] == "1"
    pod["status"] = {"phase": "Succeeded"}
    assert pod_usage(pod) == {}


def test_claim_create_is_forbidden_when_devices_exceed_quota(store: Store) -> None:
    store.create("resourcequotas", _quota({"nvidia-h100.deviceclass.resource.k8s.io/devices": "8"}))
    store.create("resourceclaims", _claim("first", count=6))
    with pytest.raises(ApiError) as raised:
        store.create("resourceclaims", _claim("second", count=4))
    error = raised.value
    assert error.code == 403
    assert error.reason == "Forbidden"
    assert error.message == (
        'resourceclaims.resource.k8s.io "second" is forbidden: exceeded quota: gpu-quota, '
        "requested: nvidia-h100.deviceclass.resource.k8s.io/devices=4, "
        "used: nvidia-h100.deviceclass.resource.k8s.io/devices=6, "
        "limited: nvidia-h100.deviceclass.resource.k8s.io/devices=8"
    )
    assert error.details == {"name": "second", "group": "resource.k8s.io", "kind": "resourceclaims"}


def test_all_mode_claim_is_charged_32_devices_when_admitted(store: Store) -> None:
    store.create(
        "resourcequotas", _quota({"nvidia-h100.deviceclass.resource.k8s.io/devices": "16"})
    )
    with pytest.raises(
        ApiError, match=r"requested: nvidia-h100\.deviceclass\.resource\.k8s\.io/devices=32"
    ):
        store.create("resourceclaims", _claim("all", mode="All"))


def test_claim_count_quota_lists_only_the_exceeded_keys(store: Store) -> None:
    store.create(
        "resourcequotas",
        _quota(
            {
                "count/resourceclaims.resource.k8s.io": "1",
                "nvidia-h100.deviceclass.resource.k8s.io/devices": "8",
            }
        ),
    )
    store.create("resourceclaims", _claim("one"))
    with pytest.raises(ApiError) as raised:
        store.create("resourceclaims", _claim("two"))
    assert raised.value.message.endswith(
        "exceeded quota: gpu-quota, requested: count/resourceclaims.resource.k8s.io=1, "
        "used: count/resourceclaims.resource.k8s.io=1, "
        "limited: count/resourceclaims.resource.k8s.io=1"
    )


def test_pod_create_is_forbidden_when_cpu_memory_or_pod_count_exceed_quota(store: Store) -> None:
    store.create(
        "resourcequotas", _quota({"requests.cpu": "3", "requests.memory": "12Gi", "pods": "5"})
    )
    store.create("pods", _pod("one"))
    with pytest.raises(ApiError) as raised:
        store.create("pods", _pod("two"))
    assert raised.value.message == (
        'pods "two" is forbidden: exceeded quota: gpu-quota, '
        "requested: requests.cpu=2,requests.memory=8Gi, "
        "used: requests.cpu=2,requests.memory=8Gi, limited: requests.cpu=3,requests.memory=12Gi"
    )
    assert raised.value.details == {"name": "two", "kind": "pods"}


def test_pod_without_cpu_request_is_forbidden_when_quota_limits_cpu(store: Store) -> None:
    store.create("resourcequotas", _quota({"requests.cpu": "3"}))
    with pytest.raises(ApiError) as raised:
        store.create("pods", _pod("bare", cpu=None))
    assert raised.value.message == (
        'pods "bare" is forbidden: failed quota: gpu-quota: must specify requests.cpu for: main'
    )


def test_status_used_follows_creates_and_deletes(store: Store) -> None:
    store.create(
        "resourcequotas",
        _quota(
            {
                "count/resourceclaims.resource.k8s.io": "10",
                "nvidia-h100.deviceclass.resource.k8s.io/devices": "8",
                "requests.cpu": "10",
                "requests.memory": "1Ti",
                "pods": "10",
            }
        ),
    )
    quota = store.get("resourcequotas", "team", "gpu-quota")
    assert quota["status"]["hard"]["requests.memory"] == "1Ti"
    assert set(_used(store).values()) == {"0"}
    store.create("resourceclaims", _claim("c", count=2))
    store.create("pods", _pod("p", cpu="500m", memory="40Gi"))
    assert _used(store) == {
        "count/resourceclaims.resource.k8s.io": "1",
        "nvidia-h100.deviceclass.resource.k8s.io/devices": "2",
        "requests.cpu": "500m",
        "requests.memory": "40Gi",
        "pods": "1",
    }
    store.delete("resourceclaims", "team", "c")
    store.delete("pods", "team", "p")
    assert set(_used(store).values()) == {"0"}


def test_terminal_pods_stop_counting_when_they_finish(store: Store) -> None:
    store.create("resourcequotas", _quota({"pods": "1"}))
    pod = store.create("pods", _pod("done"))
    pod["status"]["phase"] = "Succeeded"
    store.update("pods", pod, subresource="status", internal=True)
    assert _used(store) == {"pods": "0"}
    store.create("pods", _pod("next"))


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["pod", "claim", "delete", "finish"]),
            st.integers(0, 5),
            st.sampled_from(["1", "500m", "2"]),
        ),
        max_size=30,
    )
)
def test_the_running_total_is_the_sum_over_what_is_there(steps) -> None:
    """However pods and claims come, finish and go, what the controller charges a namespace
    equals pod_usage + claim_usage summed over the objects the store holds."""
    store = Store()
    store.create(
        "namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}},
        internal=True,
    )
    controller = QuotaController(store)
    controller.install()
    for action, index, cpu in steps:
        name = f"o-{index}"
        if action == "pod" and store.get("pods", "team", name) is None:
            store.create("pods", _pod(name, cpu=cpu), internal=True)
        elif action == "claim" and store.get("resourceclaims", "team", name) is None:
            store.create("resourceclaims", _claim(name, count=index + 1), internal=True)
        elif action == "finish" and (pod := store.get("pods", "team", name)) is not None:
            pod["status"] = {"phase": "Succeeded"}
            store.update("pods", pod, subresource="status", internal=True)
        elif action == "delete":
            for resource in ("pods", "resourceclaims"):
                if store.get(resource, "team", name) is not None:
                    store.delete(resource, "team", name)
    expected: dict[str, Quantity] = {}
    for pod in store.list("pods", "team"):
        add_usage(expected, pod_usage(pod))
    for claim in store.list("resourceclaims", "team"):
        add_usage(expected, claim_usage(claim))
    charged = controller._usage("team")
    assert {k: v.amount for k, v in charged.items()} == {k: v.amount for k, v in expected.items()}
