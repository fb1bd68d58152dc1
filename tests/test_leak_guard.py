"""The leak guard of conftest.py: a test that leaves Pods or ResourceClaims in the session's
simulated cluster fails the suite; one that removes what it made passes.

The guard's look at a cluster is tested against a cluster of this test's own; the guard as the
suite runs it, in a pytest run of its own (a subprocess with the project's conftest and a
session cluster of its own) whose tests leak a pod, remove theirs, or leave a claim for a
module fixture to remove after the session's last test."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import cluster_objects, objects_left
from simcluster.cluster import SimCluster

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]


def pod(name: str, **metadata) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", **metadata},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def claim(name: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "nvidia-h100"}}]
            }
        },
    }


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(topology=None) as cluster:
        yield cluster


def test_what_was_made_after_the_baseline_is_left_and_named(sim):
    sim.store.create("pods", pod("before"))
    baseline = frozenset(cluster_objects(sim.store))
    sim.store.create("pods", pod("made"))
    sim.store.create("resourceclaims", claim("made-claim"))
    sim.store.create("pods", pod("stuck", finalizers=["example.com/hold"]))
    sim.store.delete("pods", "default", "stuck")  # marked for deletion, held by its finalizer

    left = objects_left(sim.store, baseline, timeout=0)

    assert [(obj.resource, obj.namespace, obj.name) for obj in left] == [
        ("pods", "default", "made"),
        ("pods", "default", "stuck"),
        ("resourceclaims", "default", "made-claim"),
    ]
    assert str(left[0]) == "Pod default/made"
    assert str(left[1]).startswith("Pod default/stuck (deleting since ")
    assert str(left[1]).endswith(", finalizers ['example.com/hold'])")
    assert str(left[2]) == "ResourceClaim default/made-claim"


def test_an_object_made_again_under_the_same_name_is_a_new_one(sim):
    sim.store.create("pods", pod("same"))
    baseline = frozenset(cluster_objects(sim.store))
    sim.store.delete("pods", "default", "same")
    sim.store.create("pods", pod("same"))

    assert [str(obj) for obj in objects_left(sim.store, baseline, timeout=0)] == [
        "Pod default/same"
    ]


class WatchedStore:
    """A store whose first list that shows pod `name` sets `seen`."""

    def __init__(self, store, name: str) -> None:
        self.store = store
        self.name = name
        self.seen = threading.Event()

    def list_shared(self, resource: str):
        items, version = self.store.list_shared(resource)
        if resource == "pods" and any(obj["metadata"]["name"] == self.name for obj in items):
            self.seen.set()
        return items, version


def test_an_object_whose_deletion_ends_while_the_guard_waits_counts_as_gone(sim):
    baseline = frozenset(cluster_objects(sim.store))
    sim.store.create("pods", pod("going", finalizers=["example.com/hold"]))
    sim.store.delete("pods", "default", "going")
    watched = WatchedStore(sim.store, "going")

    def release() -> None:
        # Once the guard has seen the pod (still deleting), its finalizer is dropped.
        if watched.seen.wait(timeout=30):
            held = sim.store.get("pods", "default", "going")
            held["metadata"]["finalizers"] = []
            sim.store.update("pods", held)

    releaser = threading.Thread(target=release)
    releaser.start()
    try:
        assert objects_left(watched, baseline, timeout=30) == []
    finally:
        watched.seen.set()
        releaser.join()
    assert sim.store.get("pods", "default", "going") is None


INNER_TESTS = """
from controlplane import kube


def pod(name):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def test_leaks_a_pod(cluster):
    kube.create(kube.POD, "default", pod("leaked-pod"))


def test_removes_its_pod(cluster):
    kube.create(kube.POD, "default", pod("removed-pod"))
    assert kube.delete(kube.POD, "default", "removed-pod")


def test_after_the_leak(cluster):
    # The guard deleted what the failed test left: the tests after it see a clean cluster.
    assert kube.get(kube.POD, "default", "leaked-pod") is None
    assert kube.list_objects(kube.POD, namespace="default") == []
"""


LAST_TESTS = """
import pytest

from controlplane import kube


@pytest.fixture(scope="module")
def sweeper(cluster):
    yield
    for claim in kube.list_objects(kube.RESOURCECLAIM, namespace="default"):
        kube.delete(kube.RESOURCECLAIM, "default", claim["metadata"]["name"])


def test_leaves_a_claim_to_its_module(sweeper):
    # The session's last test: the guard looks before the module's and the session's
    # fixtures end (the sweeper would remove the claim, the session would stop the cluster).
    kube.create(
        kube.RESOURCECLAIM,
        "default",
        {
            "metadata": {"name": "module-claim"},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "nvidia-h100"}}]
                }
            },
        },
    )
"""


def test_a_test_that_leaks_a_pod_fails_the_suite(pytester, monkeypatch):
    pytester.makepyfile(test_inner=INNER_TESTS, test_last=LAST_TESTS)
    # The run imports the project's conftest (its `cluster` fixture and the guard) as a plugin.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    result = pytester.runpytest_subprocess(
        "-p",
        "conftest",
        "--ds=controlplane.settings",
        "-p",
        "no:cacheprovider",
        "--cluster-leak-timeout=1",
        "-v",
    )

    result.assert_outcomes(passed=4, errors=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*test_leaks_a_pod PASSED*",
            "*test_leaks_a_pod ERROR*",
            "*test_removes_its_pod PASSED*",
            "*test_after_the_leak PASSED*",
            "*test_leaves_a_claim_to_its_module PASSED*",
            "*test_leaves_a_claim_to_its_module ERROR*",
            "*ERROR at teardown of test_leaks_a_pod*",
            "*test_inner.py::test_leaks_a_pod left 1 object(s) in the session's cluster*"
            "Pod default/leaked-pod",
            "*ERROR at teardown of test_leaves_a_claim_to_its_module*",
            "*test_last.py::test_leaves_a_claim_to_its_module left 1 object(s)*"
            "ResourceClaim default/module-claim",
        ]
    )
    assert "removed-pod" not in result.stdout.str()
