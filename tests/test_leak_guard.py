"""The leak guard of conftest.py: a test that leaves Pods or ResourceClaims in the session's
development cluster fails the suite; one that removes what it made passes.

The guard's look at a cluster is tested against a cluster of this module's own; the guard as
the suite runs it, in a pytest run of its own (a subprocess with the project's conftest and a
session cluster of its own) whose tests leak a pod, remove theirs, or leave a claim for a
module fixture to remove after the session's last test."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import cluster_objects, objects_left
from devstack import binaries
from devstack.cluster import DevCluster

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
# Read before pytester points HOME at its own folder: the inner run uses the binaries built.
CACHE_HOME = binaries.cache_root().parents[1]


def pod(name: str, **metadata) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **metadata},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def claim(name: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "nvidia-h100"}}]
            }
        },
    }


@pytest.fixture(scope="module")
def dev(tmp_path_factory) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("leak-guard")) as cluster:
        yield cluster


@pytest.fixture
def ns(dev) -> Iterator[str]:
    """A namespace of the test's own in the module's cluster; what is in it goes after."""
    name = f"leak-{uuid.uuid4().hex[:8]}"
    dev.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    for obj in dev.objects():
        if obj["metadata"].get("namespace") == name:
            dev.remove(obj["kind"], name, obj["metadata"]["name"])
    dev.api.delete("v1", "Namespace", name)


def make(dev: DevCluster, ns: str, body: dict) -> None:
    version = body["apiVersion"]
    dev.api.request("POST", dev.api.path(version, body["kind"], ns), body)


def test_what_was_made_after_the_baseline_is_left_and_named(dev, ns):
    make(dev, ns, pod("before"))
    baseline = frozenset(cluster_objects(dev))
    make(dev, ns, pod("made"))
    make(dev, ns, claim("made-claim"))
    make(dev, ns, pod("stuck", finalizers=["example.com/hold"]))
    dev.api.delete("v1", "Pod", "stuck", ns)  # marked for deletion, held by its finalizer

    left = objects_left(dev, baseline, timeout=0)

    assert [(obj.kind, obj.namespace, obj.name) for obj in left] == [
        ("Pod", ns, "made"),
        ("Pod", ns, "stuck"),
        ("ResourceClaim", ns, "made-claim"),
    ]
    assert str(left[0]) == f"Pod {ns}/made"
    assert str(left[1]).startswith(f"Pod {ns}/stuck (deleting since ")
    assert str(left[1]).endswith(", finalizers ['example.com/hold'])")
    assert str(left[2]) == f"ResourceClaim {ns}/made-claim"


def test_an_object_made_again_under_the_same_name_is_a_new_one(dev, ns):
    make(dev, ns, pod("same"))
    baseline = frozenset(cluster_objects(dev))
    dev.remove("Pod", ns, "same")
    make(dev, ns, pod("same"))

    assert [str(obj) for obj in objects_left(dev, baseline, timeout=0)] == [f"Pod {ns}/same"]


class Watched:
    """The cluster, as the guard looks at it; its first look that shows pod `name` sets
    `seen`."""

    def __init__(self, dev: DevCluster, name: str) -> None:
        self.dev = dev
        self.name = name
        self.seen = threading.Event()

    def objects(self) -> list[dict]:
        found = self.dev.objects()
        if any(o["kind"] == "Pod" and o["metadata"]["name"] == self.name for o in found):
            self.seen.set()
        return found


def test_an_object_whose_deletion_ends_while_the_guard_waits_counts_as_gone(dev, ns):
    baseline = frozenset(cluster_objects(dev))
    make(dev, ns, pod("going", finalizers=["example.com/hold"]))
    dev.api.delete("v1", "Pod", "going", ns)
    watched = Watched(dev, "going")

    def release() -> None:
        # Once the guard has seen the pod (still deleting), its finalizer is dropped.
        if watched.seen.wait(timeout=30):
            dev.api.patch("v1", "Pod", "going", {"metadata": {"finalizers": None}}, ns)

    releaser = threading.Thread(target=release)
    releaser.start()
    try:
        assert objects_left(watched, baseline, timeout=30) == []
    finally:
        watched.seen.set()
        releaser.join()
    assert dev.pod(ns, "going") is None


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
    monkeypatch.setenv("XDG_CACHE_HOME", str(CACHE_HOME))
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
