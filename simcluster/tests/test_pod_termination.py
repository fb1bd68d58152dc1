"""Graceful pod deletion as a real cluster does it: a pod a node runs is marked (deletionTimestamp
= now + grace, deletionGracePeriodSeconds), its kubelet sends SIGTERM, and the pod goes once its
containers have exited or were killed when the grace ran out; what the containers did is in the
pod's last state. Unscheduled pods, `--grace-period=0 --force` and terminal pods go at once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from simcluster.cluster import SimCluster
from simcluster.tests.conftest import Kubectl, wait_until
from simcluster.tests.test_scheduler_api import GpuEnv, _make_env


@pytest.fixture
def gpus(sim: SimCluster, kube_api: client.ApiClient) -> Iterator[GpuEnv]:
    yield from _make_env(sim, kube_api, [2])


def _run(env: GpuEnv, name: str, *, grace: int | None = None) -> client.V1Pod:
    """A running pod holding one GPU through its own claim."""
    env.claim(name, count=1)
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "resources": {"claims": [{"name": "gpu", "request": "gpu"}]},
            }
        ],
    }
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    env.core.create_namespaced_pod(env.namespace, {"metadata": {"name": name}, "spec": spec})
    return env.wait_running(name)


def _gone(env: GpuEnv, name: str) -> bool:
    try:
        env.read_pod(name)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _moment(value: str | datetime) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class _LastState:
    """A pod's last state as a watch delivers it (the DELETED event), from the version the
    namespace had when this was made."""

    def __init__(self, env: GpuEnv) -> None:
        self._env = env
        self._version = env.core.list_namespaced_pod(env.namespace).metadata.resource_version

    def deleted(self, name: str) -> dict:
        stream = watch.Watch().stream(
            self._env.core.list_namespaced_pod,
            self._env.namespace,
            resource_version=self._version,
            timeout_seconds=15,
            _preload_content=False,
        )
        for event in stream:
            if event["type"] == "DELETED" and event["raw_object"]["metadata"]["name"] == name:
                return event["raw_object"]
        pytest.fail(f"no DELETED event for pod {name} within 15 s")


def _terminated(pod: dict) -> dict:
    (status,) = pod["status"]["containerStatuses"]
    return status["state"]["terminated"]


def test_a_deleted_pod_is_marked_its_containers_stop_and_then_it_goes(gpus: GpuEnv) -> None:
    _run(gpus, "quick")
    last = _LastState(gpus)
    before = datetime.now(UTC).replace(microsecond=0)
    marked = gpus.core.delete_namespaced_pod("quick", gpus.namespace)

    # The answer is the pod marked for deletion, the default grace period from now.
    assert marked.metadata.deletion_grace_period_seconds == 30
    deadline = _moment(marked.metadata.deletion_timestamp)
    assert before + timedelta(seconds=29) <= deadline <= before + timedelta(seconds=31)
    # Its container exits on SIGTERM: it goes well before the grace runs out.
    final = last.deleted("quick")
    ended = _terminated(final)
    assert ended["exitCode"] == 0
    assert ended["reason"] == "Completed"
    assert _moment(ended["finishedAt"]) < deadline - timedelta(seconds=25)
    assert final["status"]["phase"] == "Succeeded"
    reasons = [
        e.reason
        for e in gpus.core.list_namespaced_event(gpus.namespace).items
        if e.involved_object.name == "quick"
    ]
    assert "Killing" in reasons
    wait_until(
        lambda: gpus.read_claim("quick").status.allocation,
        lambda allocation: allocation is None,
        "claim deallocated once its pod is gone",
    )


def test_a_container_ignoring_sigterm_holds_its_devices_until_the_grace_runs_out(
    sim: SimCluster, gpus: GpuEnv
) -> None:
    _run(gpus, "stubborn", grace=3)
    sim.on_sigterm(gpus.namespace, "stubborn", exit_after=None)
    last = _LastState(gpus)
    requested = datetime.now(UTC)
    gpus.core.delete_namespaced_pod("stubborn", gpus.namespace)

    terminating = gpus.read_pod("stubborn")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.status.container_statuses[0].state.running is not None
    claim = gpus.read_claim("stubborn")
    assert claim.status.allocation is not None
    assert [r.name for r in claim.status.reserved_for] == ["stubborn"]

    final = last.deleted("stubborn")
    gone_at = datetime.now(UTC)
    ended = _terminated(final)
    assert ended["exitCode"] == 137
    finished = _moment(ended["finishedAt"])
    # Killed when the grace ran out (the API's times are whole seconds).
    assert abs((finished - requested).total_seconds() - 3) <= 1
    assert gone_at - requested >= timedelta(seconds=2)
    assert final["status"]["phase"] == "Failed"


def test_a_container_exits_some_seconds_after_sigterm(sim: SimCluster, gpus: GpuEnv) -> None:
    _run(gpus, "draining")
    sim.on_sigterm(gpus.namespace, "draining", exit_after=1.5)
    last = _LastState(gpus)
    requested = datetime.now(UTC)
    gpus.core.delete_namespaced_pod("draining", gpus.namespace)
    assert not _gone(gpus, "draining")
    final = last.deleted("draining")
    ended = _terminated(final)
    assert ended["exitCode"] == 0
    assert abs((_moment(ended["finishedAt"]) - requested).total_seconds() - 1.5) <= 1


def test_a_second_deletion_brings_the_end_forward_and_force_removes_at_once(
    sim: SimCluster, gpus: GpuEnv
) -> None:
    _run(gpus, "forced")
    sim.on_sigterm(gpus.namespace, "forced", exit_after=None)
    first = gpus.core.delete_namespaced_pod("forced", gpus.namespace)
    assert first.metadata.deletion_grace_period_seconds == 30

    # A longer grace never pushes the end back.
    again = gpus.core.delete_namespaced_pod(
        "forced", gpus.namespace, body=client.V1DeleteOptions(grace_period_seconds=300)
    )
    assert again.metadata.deletion_timestamp == first.metadata.deletion_timestamp

    gpus.core.delete_namespaced_pod(
        "forced", gpus.namespace, body=client.V1DeleteOptions(grace_period_seconds=0)
    )
    assert _gone(gpus, "forced")


def test_a_pod_no_node_runs_goes_at_once(gpus: GpuEnv) -> None:
    gpus.claim("nowhere", count=5)  # more GPUs than the node has: never scheduled
    gpus.pod("nowhere", "nowhere")
    gpus.wait_unscheduled("nowhere")

    gpus.core.delete_namespaced_pod("nowhere", gpus.namespace)

    assert _gone(gpus, "nowhere")


def test_kubectl_delete_grace_period_and_force(
    sim: SimCluster, gpus: GpuEnv, kubectl: Kubectl
) -> None:
    _run(gpus, "patient")
    _run(gpus, "hard")
    sim.on_sigterm(gpus.namespace, "patient", exit_after=None)
    sim.on_sigterm(gpus.namespace, "hard", exit_after=None)

    kubectl("delete", "pod", "patient", "-n", gpus.namespace, "--grace-period=1", "--wait=false")
    listed = kubectl("get", "pods", "-n", gpus.namespace).stdout
    assert "Terminating" in listed
    wait_until(lambda: _gone(gpus, "patient"), bool, "pod gone one second after its deletion")

    result = kubectl("delete", "pod", "hard", "-n", gpus.namespace, "--force", "--grace-period=0")
    assert "force deleted" in result.stdout
    assert _gone(gpus, "hard")
