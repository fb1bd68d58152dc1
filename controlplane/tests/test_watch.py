"""controlplane.kube watch streams against the simulated cluster over HTTP: paginated lists,
watch from the list's version, bookmarks, relist on 410 Gone, resume with backoff after a
dropped connection, bounded watches."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from controlplane import kube
from controlplane.kube.client import Kind
from controlplane.kube.watch import Event, Gone, Informer, list_all, watch_events
from simcluster.cluster import SimCluster

# Events: a served kind that no controller of the simulated cluster writes.
EVENT = Kind("Event", "", "v1", "events")
NAMESPACE = "watched"


@pytest.fixture
def sim(tmp_path, settings) -> Iterator[SimCluster]:
    cluster = SimCluster(topology={"nodes": [], "deviceClasses": []}).start()
    settings.KUBECONFIG = str(cluster.write_kubeconfig(tmp_path / "kubeconfig"))
    kube.reset()
    cluster.store.create("namespaces", {"metadata": {"name": NAMESPACE}})
    yield cluster
    cluster.stop()
    kube.reset()


def event(name: str, reason: str = "Probe") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": NAMESPACE},
        "reason": reason,
    }


class Recorder:
    """A Handler that keeps what it was told, and lets a test wait for it."""

    def __init__(self) -> None:
        self.replacements: list[set] = []
        self.events: list[tuple[str, str]] = []
        self._changed = threading.Condition()

    def replaced(self, kind, objects) -> None:
        with self._changed:
            self.replacements.append(set(objects))
            self._changed.notify_all()

    def changed(self, kind, change: Event) -> None:
        with self._changed:
            self.events.append((change.type, change.object["metadata"]["name"]))
            self._changed.notify_all()

    def wait_for(self, predicate, timeout: float = 10.0) -> None:
        with self._changed:
            assert self._changed.wait_for(predicate, timeout), (self.events, self.replacements)


def watching(handler: Recorder, **options) -> Informer:
    """A started informer, listed and with its first watch open."""
    informer = Informer(EVENT, handler, **options).start()
    assert informer.synced.wait(10)
    deadline = time.monotonic() + 10
    while informer.watches < 1:
        assert time.monotonic() < deadline, "the informer never opened its watch"
        time.sleep(0.01)
    return informer


def test_list_all_pages_through_the_kind(sim: SimCluster) -> None:
    for index in range(7):
        kube.create(EVENT, NAMESPACE, event(f"e{index}"))
    sim.requests.clear()
    items, version = list_all(EVENT, page_size=2)
    assert sorted(obj["metadata"]["name"] for obj in items) == [f"e{i}" for i in range(7)]
    assert int(version) > 0
    assert sim.requests.count("list", "events") == 4  # 2 + 2 + 2 + 1


def test_an_informer_lists_then_sees_every_change_in_order(sim: SimCluster) -> None:
    kube.create(EVENT, NAMESPACE, event("before"))
    handler = Recorder()
    informer = watching(handler, page_size=1)
    try:
        assert handler.replacements == [{(NAMESPACE, "before")}]
        kube.create(EVENT, NAMESPACE, event("after"))
        kube.merge_patch(EVENT, NAMESPACE, "after", {"reason": "Changed"})
        kube.delete(EVENT, NAMESPACE, "before")
        handler.wait_for(lambda: len(handler.events) == 3)
        assert handler.events == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "before")]
        assert set(informer.snapshot()) == {(NAMESPACE, "after")}
        assert informer.snapshot()[(NAMESPACE, "after")]["reason"] == "Changed"
        assert (informer.lists, informer.watches) == (1, 1)
    finally:
        informer.stop()


def test_bookmarks_move_the_version_without_events(sim: SimCluster) -> None:
    sim._server.bookmark_interval = 0.2
    handler = Recorder()
    informer = watching(handler)
    try:
        listed = int(informer.resource_version)
        # Writes of another kind move the server's version, not this informer's objects.
        sim.store.create("namespaces", {"metadata": {"name": "elsewhere"}})
        deadline = time.monotonic() + 5
        while int(informer.resource_version) <= listed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert int(informer.resource_version) > listed
        assert handler.events == []
    finally:
        informer.stop()


def test_a_watch_from_a_compacted_version_raises_gone(sim: SimCluster) -> None:
    _, version = list_all(EVENT)
    kube.create(EVENT, NAMESPACE, event("one"))
    kube.create(EVENT, NAMESPACE, event("two"))
    sim.store.compact()
    with pytest.raises(Gone):
        list(watch_events(EVENT, resource_version=version, timeout_seconds=1))


def watch_down(sim: SimCluster) -> None:
    """Cut the informer's watch and keep it from coming back until faults are cleared."""
    sim.faults.set("watch", "events", error_rate=1.0, status=503)
    sim.faults.drop_watches()
    deadline = time.monotonic() + 10
    while not any(e.verb == "watch" and e.code == 503 for e in sim.requests.entries()):
        assert time.monotonic() < deadline, "the informer never tried to watch again"
        time.sleep(0.05)


def test_an_informer_relists_after_410_gone(sim: SimCluster) -> None:
    kube.create(EVENT, NAMESPACE, event("kept"))
    handler = Recorder()
    informer = watching(handler, max_backoff=0.5)
    try:
        watch_down(sim)
        # While its watch is down, the server moves on and compacts its history.
        kube.delete(EVENT, NAMESPACE, "kept")
        sim.store.create("namespaces", {"metadata": {"name": "moves-on"}})
        sim.store.compact()
        sim.faults.clear()
        handler.wait_for(lambda: len(handler.replacements) == 2)
        assert informer.lists == 2
        assert handler.replacements[-1] == set()
        # The deletion happened while no watch was open: the new list tells it by absence,
        # and the informer reports it as an event all the same.
        assert handler.events == [("DELETED", "kept")]
    finally:
        informer.stop()


def test_a_dropped_connection_resumes_from_the_last_version(sim: SimCluster) -> None:
    handler = Recorder()
    informer = watching(handler, max_backoff=0.5)
    try:
        assert informer.healthy
        watch_down(sim)
        assert not informer.healthy  # what it holds may be behind while it cannot watch
        kube.create(EVENT, NAMESPACE, event("during"))  # while no watch is open
        sim.faults.clear()
        handler.wait_for(lambda: ("ADDED", "during") in handler.events)
        assert informer.lists == 1  # resumed from its version: no second list
        assert informer.watches >= 2
        assert informer.healthy
    finally:
        informer.stop()


def test_watches_are_bounded_and_reopened(sim: SimCluster) -> None:
    handler = Recorder()
    informer = watching(handler, timeout_seconds=1)
    try:
        deadline = time.monotonic() + 10
        while informer.watches < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert informer.watches >= 3
        assert informer.lists == 1
        watch_paths = [e for e in sim.requests.entries() if e.verb == "watch"]
        assert len(watch_paths) >= 2
        kube.create(EVENT, NAMESPACE, event("late"))
        handler.wait_for(lambda: ("ADDED", "late") in handler.events)
    finally:
        informer.stop()


def test_stop_ends_the_thread_promptly(sim: SimCluster) -> None:
    informer = watching(Recorder())
    informer.stop()
    # Its watch would run for 300 s; stop() waits for the thread 5 s at most.
    assert not informer._thread.is_alive()


def test_an_optional_kind_the_cluster_does_not_serve_is_empty_and_healthy(sim: SimCluster):
    # A kind of an API group version this cluster does not serve (404 on its list), as
    # resource.k8s.io/v1alpha3 DeviceTaintRules on a cluster with alpha APIs off.
    unserved = Kind("Widget", "example.com", "v1alpha1", "widgets", namespaced=False)
    handler = Recorder()
    informer = Informer(unserved, handler, optional=True, recheck_seconds=0.2).start()
    try:
        assert informer.synced.wait(10)
        assert informer.healthy
        assert not informer.served
        assert informer.snapshot() == {}
        handler.wait_for(lambda: len(handler.replacements) >= 2)  # listed again, still 404
        assert informer.healthy
        assert informer.watches == 0
    finally:
        informer.stop()
    required = Informer(unserved, Recorder(), max_backoff=0.2).start()
    try:
        time.sleep(0.5)
        assert not required.healthy  # a kind that must be served is a failure when it is not
    finally:
        required.stop()
