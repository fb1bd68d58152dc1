"""The development cluster keeps KWOK running: kwok v0.8.0 can die of a data race in its CEL
environments ("fatal error: concurrent map writes"), which took a whole test process's session
cluster in a fresh-clone run. A cluster starts it again; pods keep being run."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from devstack.cluster import MAX_RESTARTS, DevCluster
from runtime.tests.helpers import wait_until

TOPOLOGY = {"generate": {"nodes": 1, "gpus_per_node": 1, "product": "NVIDIA GeForce RTX 3080"}}


@pytest.fixture
def dev(tmp_path) -> Iterator[DevCluster]:
    """A small cluster of the test's own (the second test leaves its kwok dead)."""
    with DevCluster(tmp_path / "kept", topology=TOPOLOGY) as cluster:
        yield cluster


def pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def phase(dev: DevCluster, name: str) -> str:
    found = dev.api.get("v1", "Pod", name, "default")
    return ((found or {}).get("status") or {}).get("phase", "")


def test_kwok_killed_is_started_again_and_pods_run(dev: DevCluster) -> None:
    first = dev.processes["kwok"]
    first.send_signal(signal.SIGKILL)  # as the Go runtime's fatal error ends it
    first.wait(10)
    wait_until(
        lambda: dev.processes["kwok"] is not first and dev.processes["kwok"].poll() is None,
        "kwok to be started again",
    )
    assert dev.running()
    assert dev.restarts["kwok"] == 1
    assert "--- devstack: kwok exited with -9; restart 1" in (dev.logs / "kwok.log").read_text()
    dev.api.apply(pod("after-restart"))
    try:
        wait_until(lambda: phase(dev, "after-restart") == "Running", "the pod to run")
    finally:
        dev.api.delete("v1", "Pod", "after-restart", "default")


def test_a_component_that_keeps_dying_counts_as_exited(dev: DevCluster) -> None:
    # Past MAX_RESTARTS the cluster stops starting it and says it exited (make run then stops).
    while dev.restarts.get("kwok", 0) <= MAX_RESTARTS:
        current = dev.processes["kwok"]
        if current.poll() is None:
            current.send_signal(signal.SIGKILL)
            current.wait(10)
        wait_until(
            lambda current=current: dev.processes["kwok"] is not current or not dev.running(),
            "kwok to be started again or given up",
        )
        if not dev.running():
            break
    assert not dev.running()
    assert "kwok exited with -9" in dev.exited()
