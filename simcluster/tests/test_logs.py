"""The pod `log` subresource and the simulated kubelet's test hooks (append lines, make a
container fail) over HTTP with the official kubernetes client."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client import ApiException

from simcluster.cluster import SimCluster
from simcluster.errors import ApiError
from simcluster.tests.conftest import wait_until

DEADLINE_SECONDS = 10.0
NAMESPACE = "logs"
STARTUP = ["simcluster: image python:3.12", "simcluster: command python -m http.server 8080"]
TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (.*)$")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    with SimCluster(topology={"generate": {"nodes": 1, "gpus_per_node": 1}}) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def core(sim: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.CoreV1Api]:
    configuration = client.Configuration()
    kubeconfig = sim.write_kubeconfig(tmp_path_factory.mktemp("logs") / "kubeconfig")
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        yield core


def _pod(
    core: client.CoreV1Api,
    *,
    containers: list[dict[str, Any]] | None = None,
    running: bool = True,
    **spec: Any,
) -> str:
    name = f"pod-{uuid.uuid4().hex[:8]}"
    containers = containers or [
        {
            "name": "main",
            "image": "python:3.12",
            "command": ["python", "-m", "http.server"],
            "args": ["8080"],
        }
    ]
    core.create_namespaced_pod(
        NAMESPACE, {"metadata": {"name": name}, "spec": {"containers": containers, **spec}}
    )
    if running:
        wait_until(
            lambda: core.read_namespaced_pod(name, NAMESPACE),
            lambda p: p.status.phase == "Running",
            f"{name} running",
        )
    return name


def _error(exc_info: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return json.loads(exc_info.value.body)


def test_log_is_the_kubelet_startup_lines_when_the_container_started(
    core: client.CoreV1Api, sim: SimCluster
) -> None:
    name = _pod(core)
    response = core.read_namespaced_pod_log(name, NAMESPACE, _preload_content=False)
    assert response.headers["Content-Type"] == "text/plain"
    assert response.data.decode().splitlines() == [*STARTUP, "simcluster: started"]


def test_appended_lines_are_read_back_with_tail_limit_and_timestamps(
    core: client.CoreV1Api, sim: SimCluster
) -> None:
    name = _pod(core)
    sim.append_log(NAMESPACE, name, ["epoch 1 loss 0.9", "epoch 2 loss 0.5"])
    sim.append_log(NAMESPACE, name, "epoch 3 loss 0.2")
    text = core.read_namespaced_pod_log(name, NAMESPACE, tail_lines=2)
    assert text == "epoch 2 loss 0.5\nepoch 3 loss 0.2\n"
    assert core.read_namespaced_pod_log(name, NAMESPACE, tail_lines=0) == ""
    assert core.read_namespaced_pod_log(name, NAMESPACE, limit_bytes=10) == "simcluster"
    stamped = core.read_namespaced_pod_log(name, NAMESPACE, timestamps=True, tail_lines=1)
    match = TIMESTAMPED.match(stamped.rstrip("\n"))
    assert match is not None
    assert match.group(1) == "epoch 3 loss 0.2"
    assert core.read_namespaced_pod_log(name, NAMESPACE, since_seconds=60).endswith("0.2\n")


def test_since_seconds_leaves_out_older_lines(core: client.CoreV1Api, sim: SimCluster) -> None:
    name = _pod(core)
    time.sleep(2.5)
    sim.append_log(NAMESPACE, name, "fresh")
    # The window starts when the server reads the request: 2 s leaves time for the call.
    assert core.read_namespaced_pod_log(name, NAMESPACE, since_seconds=2) == "fresh\n"


def test_multi_container_pod_needs_a_container_name(core: client.CoreV1Api) -> None:
    name = _pod(
        core,
        containers=[{"name": "main", "image": "busybox:1.36"}, {"name": "ssh", "image": "sshd:1"}],
        initContainers=[{"name": "setup", "image": "busybox:1.36"}],
    )
    with pytest.raises(ApiException) as exc_info:
        core.read_namespaced_pod_log(name, NAMESPACE)
    assert exc_info.value.status == 400
    assert _error(exc_info)["message"] == (
        f"a container name must be specified for pod {name}, choose one of: [setup main ssh]"
    )
    with pytest.raises(ApiException) as wrong:
        core.read_namespaced_pod_log(name, NAMESPACE, container="nope")
    assert _error(wrong)["message"] == f"container nope is not valid for pod {name}"
    assert core.read_namespaced_pod_log(name, NAMESPACE, container="ssh").endswith("started\n")
    assert "busybox:1.36" in core.read_namespaced_pod_log(name, NAMESPACE, container="setup")


def test_waiting_container_is_a_400_with_the_kubelet_message(core: client.CoreV1Api) -> None:
    name = _pod(
        core,
        running=False,
        volumes=[{"name": "keys", "secret": {"secretName": "not-there"}}],
    )
    wait_until(
        lambda: core.read_namespaced_pod(name, NAMESPACE),
        lambda p: p.status.container_statuses,
        "waiting status",
    )
    with pytest.raises(ApiException) as exc_info:
        core.read_namespaced_pod_log(name, NAMESPACE)
    assert exc_info.value.status == 400
    assert _error(exc_info)["reason"] == "BadRequest"
    assert _error(exc_info)["message"] == (
        f'container "main" in pod "{name}" is waiting to start: ContainerCreating'
    )


def test_missing_pod_is_a_404_and_an_unscheduled_pod_has_an_empty_log(
    core: client.CoreV1Api,
) -> None:
    with pytest.raises(ApiException) as exc_info:
        core.read_namespaced_pod_log("nope", NAMESPACE)
    assert exc_info.value.status == 404
    assert _error(exc_info)["message"] == 'pods "nope" not found'
    name = _pod(core, running=False, nodeSelector={"no-such": "node"})
    assert core.read_namespaced_pod_log(name, NAMESPACE) == ""


def test_invalid_log_options_are_a_422(core: client.CoreV1Api) -> None:
    name = _pod(core)
    with pytest.raises(ApiException) as exc_info:
        core.read_namespaced_pod_log(name, NAMESPACE, tail_lines=-1)
    assert exc_info.value.status == 422
    assert _error(exc_info)["message"] == (
        f'PodLogOptions "{name}" is invalid: tailLines: Invalid value: -1: must be greater than '
        "or equal to 0"
    )


def test_failed_container_restarts_with_its_previous_log_kept(
    core: client.CoreV1Api, sim: SimCluster
) -> None:
    name = _pod(core)
    with pytest.raises(ApiException) as none_yet:
        core.read_namespaced_pod_log(name, NAMESPACE, previous=True)
    assert _error(none_yet)["message"] == (
        f'previous terminated container "main" in pod "{name}" not found'
    )
    sim.append_log(NAMESPACE, name, "working")
    sim.fail_container(
        NAMESPACE, name, exit_code=137, reason="OOMKilled", lines=["CUDA out of memory"]
    )
    pod = core.read_namespaced_pod(name, NAMESPACE)
    status = pod.status.container_statuses[0]
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 137
    assert status.last_state.terminated.reason == "OOMKilled"
    assert status.state.running is not None
    assert pod.status.phase == "Running"
    previous = core.read_namespaced_pod_log(name, NAMESPACE, previous=True)
    assert previous.splitlines()[-2:] == ["working", "CUDA out of memory"]
    assert core.read_namespaced_pod_log(name, NAMESPACE).splitlines()[-1] == "simcluster: started"


def test_failed_container_ends_the_pod_when_restart_policy_is_never(
    core: client.CoreV1Api, sim: SimCluster
) -> None:
    name = _pod(core, restartPolicy="Never")
    sim.fail_container(NAMESPACE, name, exit_code=2, lines=["Traceback: boom"])
    pod = core.read_namespaced_pod(name, NAMESPACE)
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (2, "Error")
    assert pod.status.container_statuses[0].restart_count == 0
    assert core.read_namespaced_pod_log(name, NAMESPACE).endswith("Traceback: boom\n")
    with pytest.raises(ValueError, match="is not running"):
        sim.append_log(NAMESPACE, name, "after the end")


def test_follow_streams_appended_lines_until_the_container_stops(
    core: client.CoreV1Api, sim: SimCluster
) -> None:
    name = _pod(core, restartPolicy="Never")
    response = core.read_namespaced_pod_log(
        name, NAMESPACE, follow=True, tail_lines=1, _preload_content=False
    )
    received: list[str] = []
    reader = threading.Thread(
        target=lambda: received.extend(
            line.decode() for line in response.stream(amt=None, decode_content=True)
        ),
        daemon=True,
    )
    reader.start()
    wait_until(lambda: "".join(received), lambda text: "started" in text, "first chunk")
    sim.append_log(NAMESPACE, name, ["step 1", "step 2"])
    wait_until(lambda: "".join(received), lambda text: "step 2" in text, "appended lines")
    sim.fail_container(NAMESPACE, name, exit_code=0, reason="Completed", lines=["done"])
    reader.join(timeout=DEADLINE_SECONDS)
    assert not reader.is_alive(), "follow did not end when the container stopped"
    assert "".join(received).splitlines() == ["simcluster: started", "step 1", "step 2", "done"]
    assert core.read_namespaced_pod(name, NAMESPACE).status.phase == "Succeeded"


def test_follow_ends_at_limit_bytes_while_the_container_runs(
    core: client.CoreV1Api, sim: SimCluster
) -> None:
    name = _pod(core)
    response = core.read_namespaced_pod_log(
        name, NAMESPACE, follow=True, tail_lines=0, limit_bytes=12, _preload_content=False
    )
    received: list[bytes] = []
    reader = threading.Thread(
        target=lambda: received.extend(response.stream(amt=None)), daemon=True
    )
    reader.start()
    sim.append_log(NAMESPACE, name, ["0123456789", "abcdefghij"])
    reader.join(timeout=DEADLINE_SECONDS)
    assert not reader.is_alive(), "follow did not end at limitBytes"
    assert b"".join(received) == b"0123456789\na"


def test_discovery_lists_the_log_subresource(core: client.CoreV1Api) -> None:
    resources = {r.name: r for r in core.get_api_resources().resources}
    assert resources["pods/log"].verbs == ["get"]
    assert resources["pods/log"].kind == "Pod"
    assert resources["pods/binding"].verbs == ["create"]


def test_logs_and_allocations_survive_a_restart_when_persisted(tmp_path: Path) -> None:
    state = tmp_path / "cluster.json"
    topology = {"generate": {"nodes": 1, "gpus_per_node": 1}}
    with SimCluster(topology=topology, persist_path=state) as first:
        first.store.create("namespaces", {"metadata": {"name": NAMESPACE}})
        first.store.create(
            "pods",
            {
                "metadata": {"name": "kept", "namespace": NAMESPACE},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
            },
        )
        wait_until(
            lambda: first.store.get("pods", NAMESPACE, "kept")["status"]["phase"],
            lambda phase: phase == "Running",
            "pod running",
        )
        first.append_log(NAMESPACE, "kept", "before the restart")
        service = first.store.create(
            "services",
            {
                "metadata": {"name": "np", "namespace": NAMESPACE},
                "spec": {"type": "NodePort", "ports": [{"port": 80}]},
            },
        )
    with SimCluster(topology=topology, persist_path=state) as second:
        second.append_log(NAMESPACE, "kept", "after the restart")
        stream = second.logs.stream(
            second.store.get("pods", NAMESPACE, "kept")["metadata"]["uid"], "main"
        )
        assert stream is not None
        assert [text for _, text in stream.lines][-2:] == [
            "before the restart",
            "after the restart",
        ]
        taken = service["spec"]["ports"][0]["nodePort"]
        with pytest.raises(ApiError, match="already allocated"):
            second.store.create(
                "services",
                {
                    "metadata": {"name": "dup", "namespace": NAMESPACE},
                    "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": taken}]},
                },
            )
