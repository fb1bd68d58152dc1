"""A stopped simulated cluster answers nothing, as a stopped API server: also not on a
keep-alive connection a client opened before (its handler thread outlives the listener)."""

from __future__ import annotations

import pytest
import requests

from simcluster.cluster import SimCluster


def test_a_stopped_cluster_answers_no_request_on_an_open_connection():
    sim = SimCluster(topology={"generate": {"nodes": 1, "gpus_per_node": 1}}, scheduler=False)
    sim.start()
    try:
        session = requests.Session()
        assert session.get(f"{sim.url}/api/v1/nodes", timeout=5).status_code == 200
    finally:
        sim.stop()
    with pytest.raises(requests.ConnectionError):
        session.get(f"{sim.url}/api/v1/nodes", timeout=5)
