"""Store semantics without HTTP: watch selector transitions, GC chains, admission hooks,
persistence across restarts, and the `python -m simcluster` entry point."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from simcluster.cluster import SimCluster
from simcluster.errors import ApiError
from simcluster.store import AdmissionRequest, Store, Watcher


@pytest.fixture
def store() -> Store:
    store = Store()
    store.create("namespaces", {"metadata": {"name": "default"}}, internal=True)
    return store


def _claim(name: str, **metadata: object) -> dict:
    return {
        "metadata": {"name": name, "namespace": "default", **metadata},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}},
    }


def _drain(watcher: Watcher) -> list[tuple[str, str]]:
    events = []
    while not watcher.events.empty():
        event = watcher.events.get()
        events.append((event.type, event.object["metadata"]["name"]))
    return events


def test_watch_with_selector_sees_objects_enter_and_leave(store: Store) -> None:
    watcher = store.watch("resourceclaims", "default", label_selector="team=a")
    store.create("resourceclaims", _claim("c1"))
    claim = store.get("resourceclaims", "default", "c1")
    assert claim is not None
    claim["metadata"]["labels"] = {"team": "a"}
    claim = store.update("resourceclaims", claim)
    claim["metadata"]["labels"] = {"team": "b"}
    store.update("resourceclaims", claim)

    assert _drain(watcher) == [("ADDED", "c1"), ("DELETED", "c1")]


def test_gc_follows_chains_of_owners(store: Store) -> None:
    root = store.create("resourceclaims", _claim("root"))
    ref = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "name": "root",
        "uid": root["metadata"]["uid"],
    }
    middle = store.create("resourceclaims", _claim("middle", ownerReferences=[ref]))
    ref2 = {**ref, "name": "middle", "uid": middle["metadata"]["uid"]}
    store.create("resourceclaims", _claim("leaf", ownerReferences=[ref2]))
    shared = store.create("resourceclaims", _claim("other"))
    ref3 = {**ref, "name": "other", "uid": shared["metadata"]["uid"]}
    store.create("resourceclaims", _claim("two-owners", ownerReferences=[ref, ref3]))

    store.delete("resourceclaims", "default", "root")

    remaining = sorted(c["metadata"]["name"] for c in store.list("resourceclaims"))
    assert remaining == ["other", "two-owners"]
    survivor = store.get("resourceclaims", "default", "two-owners")
    assert survivor is not None
    assert [r["name"] for r in survivor["metadata"]["ownerReferences"]] == ["other"]


def test_gc_collects_a_dependent_created_after_its_owner_is_gone(store: Store) -> None:
    # A controller that read its owner before the owner's deletion may create a dependent
    # afterwards; Kubernetes' GC finds the owner absent and deletes the dependent.
    owner = store.create("resourceclaims", _claim("owner"))
    kept = store.create("resourceclaims", _claim("kept"))
    ref = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    store.delete("resourceclaims", "default", "owner")
    watch = store.watch("resourceclaims", "default")

    store.create("resourceclaims", _claim("late", ownerReferences=[ref]))
    kept_ref = {**ref, "name": "kept", "uid": kept["metadata"]["uid"]}
    store.create("resourceclaims", _claim("half", ownerReferences=[ref, kept_ref]))

    remaining = sorted(c["metadata"]["name"] for c in store.list("resourceclaims"))
    assert remaining == ["half", "kept"]
    half = store.get("resourceclaims", "default", "half")
    assert half is not None
    assert [r["name"] for r in half["metadata"]["ownerReferences"]] == ["kept"]
    events = _drain(watch)
    assert ("ADDED", "late") in events
    assert ("DELETED", "late") in events


def test_admission_hook_rejects_non_internal_writes_only(store: Store) -> None:
    seen: list[AdmissionRequest] = []

    def deny(request: AdmissionRequest) -> None:
        seen.append(request)
        raise ApiError.forbidden("no")

    store.add_admission(deny)

    with pytest.raises(ApiError) as exc_info:
        store.create("resourceclaims", _claim("denied"))
    store.create("resourceclaims", _claim("allowed"), internal=True)

    assert exc_info.value.code == 403
    assert [(r.operation, r.resource, r.namespace, r.name) for r in seen] == [
        ("CREATE", "resourceclaims", "default", "denied")
    ]
    assert store.get("resourceclaims", "default", "denied") is None


def test_listener_sees_every_committed_write(store: Store) -> None:
    events: list[tuple[str, str]] = []
    store.add_listener(
        lambda event_type, resource, obj: events.append((event_type, obj["metadata"]["name"]))
    )

    store.create("resourceclaims", _claim("heard"), internal=True)
    store.delete("resourceclaims", "default", "heard")

    assert events == [("ADDED", "heard"), ("DELETED", "heard")]
    assert store.delete("resourceclaims", "default", "heard") is None


def test_persisted_objects_survive_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "cluster.json"
    with SimCluster(topology={"nodes": []}, persist_path=state, scheduler=False) as first:
        first.store.create("namespaces", {"metadata": {"name": "kept"}})
        uid = first.store.create(
            "resourceclaims", {**_claim("kept"), "metadata": {"name": "kept", "namespace": "kept"}}
        )["metadata"]["uid"]
        version = first.store.resource_version

    with SimCluster(topology={"nodes": []}, persist_path=state, scheduler=False) as second:
        claim = second.store.get("resourceclaims", "kept", "kept")
        assert claim is not None
        assert claim["metadata"]["uid"] == uid
        assert int(second.store.resource_version) >= int(version)


def test_cli_serves_and_writes_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simcluster",
            "--port",
            "0",
            "--kubeconfig-out",
            str(kubeconfig),
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        with urllib.request.urlopen(f"{url}/version", timeout=10) as response:
            version = json.loads(response.read())
        config = yaml.safe_load(kubeconfig.read_text())
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)

    assert line.startswith("simcluster serving on http://127.0.0.1:")
    # Without --emulated-version (as devstack starts it): the default, 1.36.
    assert (version["gitVersion"], version["minor"]) == ("v1.36.0-sim", "36")
    assert config["clusters"][0]["cluster"]["server"] == url
    assert process.returncode == 0


def test_watch_from_before_a_restore_is_gone(store: Store) -> None:
    store.create("resourceclaims", _claim("before"))
    restored = Store()
    restored.load(store.dump())

    with pytest.raises(ApiError) as exc_info:
        restored.watch("resourceclaims", "default", resource_version="1")

    assert exc_info.value.code == 410
    assert restored.get("resourceclaims", "default", "before") is not None
