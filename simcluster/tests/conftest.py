"""Fixtures: one simulated cluster per session, official-client and kubectl access to it."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from kubernetes import client, config

from simcluster.cluster import SimCluster

Kubectl = Callable[..., subprocess.CompletedProcess]
T = TypeVar("T")

# Small enough to start instantly; tests that need devices create their own.
TINY_TOPOLOGY: dict = {"nodes": [], "deviceClasses": []}


def wait_until(
    read: Callable[[], T], done: Callable[[T], bool], what: str, *, timeout: float = 15.0
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


@pytest.fixture(scope="session")
def sim() -> Iterator[SimCluster]:
    cluster = SimCluster(topology=TINY_TOPOLOGY)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kubeconfig(sim: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sim.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")


@pytest.fixture
def kube_api(kubeconfig: Path) -> Iterator[client.ApiClient]:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api:
        yield api


@pytest.fixture(autouse=True)
def _clean_faults(sim: SimCluster) -> Iterator[None]:
    yield
    sim.faults.clear()


@pytest.fixture
def kubectl(kubeconfig: Path, tmp_path: Path) -> Kubectl:
    env = {"HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "--cache-dir",
            str(tmp_path / "cache"),
            *args,
        ]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=60, env=env, check=False
        )
        if check and result.returncode != 0:
            pytest.fail(f"{' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result

    return run
