"""Fixtures: one simulated cluster per session and official-client access to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from simcluster.cluster import SimCluster

# Small enough to start instantly; tests that need devices create their own.
TINY_TOPOLOGY: dict = {"nodes": [], "deviceClasses": []}


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
