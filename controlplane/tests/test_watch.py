"""controlplane.kube watch streams against a development cluster's API server, through its fault
proxy: paginated lists, watch from the list's version, bookmarks, relist on 410 Gone (etcd's
history compacted), resume with backoff after a dropped connection, bounded watches."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from controlplane import kube
from controlplane.kube.client import Kind
from controlplane.kube.watch import Event, Gone, Informer, list_all, watch_events
from devstack.cluster import DevCluster

# Events: a kind the API server keeps no watch cache of, so a watch of it reads etcd's
# history, which compaction ends. PodTemplates: a kind watched from the cache, which sends
# bookmarks. Even a cluster without nodes writes events of its own (the API server's on the
# `default/kubernetes` Service, at a moment of its choosing), so every list and watch here
# selects the objects the test wrote by their label.
EVENT = Kind("Event", "", "v1", "events")
TEMPLATE = Kind("PodTemplate", "", "v1", "podtemplates")
NAMESPACE = "watched"
LABELS = {"test": "watch"}
SELECTOR = "test=watch"


@pytest.fixture(scope="module")
def quiet_cluster(tmp_path_factory) -> Iterator[DevCluster]:
    """A development cluster with no nodes behind its fault proxy, with the namespace the tests
    write in."""
    with DevCluster(
        tmp_path_factory.mktemp("watch"), topology={"nodes": [], "deviceClasses": []}, proxy=True
    ) as cluster:
        cluster.api.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        yield cluster


@pytest.fixture
def dev(quiet_cluster: DevCluster, settings) -> Iterator[DevCluster]:
    """The module's cluster, the product pointed at it through the proxy, with no faults, no
    requests logged and no events or pod templates in the test's namespace."""
    settings.KUBECONFIG = str(quiet_cluster.kubeconfig)
    kube.reset()
    _clean(quiet_cluster)
    yield quiet_cluster
    _clean(quiet_cluster)
    kube.reset()


def _clean(cluster: DevCluster) -> None:
    assert cluster.faults is not None
    cluster.faults.clear()
    for plural in ("events", "podtemplates"):
        cluster.api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/{plural}")
    cluster.requests.clear()


def compact(cluster: DevCluster) -> None:
    """Compact etcd's history up to its current revision, as the API server does every five
    minutes (--etcd-compaction-interval): a watch from an older version is then answered 410."""
    etcd = f"http://127.0.0.1:{cluster.ports['etcd']}"

    def call(path: str, body: dict) -> dict:
        request = urllib.request.Request(etcd + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    revision = call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
    call("/v3/kv/compaction", {"revision": revision, "physical": True})


def event(name: str, reason: str = "Probe") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": LABELS},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": NAMESPACE},
        "reason": reason,
    }


def pod_template(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": LABELS},
        "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
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


def wait_until(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def logged(dev: DevCluster, verb: str, resource: str, expected: int) -> int:
    """How many such requests the proxy logged, once it logged at least `expected`: it logs a
    request after it has answered it, so a client can have its answer a moment before."""
    wait_until(
        lambda: dev.requests.count(verb, resource) >= expected,
        f"the proxy logged {expected} {verb} of {resource}",
    )
    return dev.requests.count(verb, resource)


def watching(handler: Recorder, kind: Kind = EVENT, **options) -> Informer:
    """A started informer, listed and with its first watch open."""
    informer = Informer(kind, handler, label_selector=SELECTOR, **options).start()
    assert informer.synced.wait(10)
    wait_until(lambda: informer.watches >= 1, "the informer opened its watch")
    return informer


def test_list_all_pages_through_the_kind(dev: DevCluster) -> None:
    for index in range(7):
        kube.create(EVENT, NAMESPACE, event(f"e{index}"))
    dev.requests.clear()
    items, version = list_all(EVENT, label_selector=SELECTOR, page_size=2)
    assert sorted(obj["metadata"]["name"] for obj in items) == [f"e{i}" for i in range(7)]
    assert int(version) > 0
    assert logged(dev, "list", "events", 4) == 4  # 2 + 2 + 2 + 1


def test_an_informer_lists_then_sees_every_change_in_order(dev: DevCluster) -> None:
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


def test_bookmarks_move_the_version_without_events(dev: DevCluster) -> None:
    kube.create(TEMPLATE, NAMESPACE, pod_template("kept"))
    handler = Recorder()
    # The API server sends a bookmark 2 s before a watch's timeout: here 1 s after it opens.
    informer = watching(handler, TEMPLATE, timeout_seconds=3)
    try:
        listed = int(informer.resource_version)
        # A write of another kind moves the server's version, not this informer's objects; a
        # consistent list brings the watch cache up to it (etcd's progress notification), and
        # its bookmarks carry that version.
        kube.create(EVENT, NAMESPACE, event("elsewhere"))
        kube.list_objects(TEMPLATE)
        wait_until(
            lambda: int(informer.resource_version) > listed,
            "a bookmark moved the informer's version",
        )
        assert handler.events == []
        assert informer.lists == 1  # the version came from a bookmark, not a second list
        assert set(informer.snapshot()) == {(NAMESPACE, "kept")}
    finally:
        informer.stop()


def test_a_watch_from_a_compacted_version_raises_gone(dev: DevCluster) -> None:
    _, version = list_all(EVENT, label_selector=SELECTOR)
    kube.create(EVENT, NAMESPACE, event("one"))
    kube.create(EVENT, NAMESPACE, event("two"))
    compact(dev)
    with pytest.raises(Gone):
        list(
            watch_events(
                EVENT, resource_version=version, label_selector=SELECTOR, timeout_seconds=1
            )
        )


def watch_down(dev: DevCluster) -> None:
    """Cut the informer's watch and keep it from coming back until faults are cleared."""
    assert dev.faults is not None
    dev.faults.set("watch", "events", error_rate=1.0, status=503)
    dev.faults.drop_watches()
    wait_until(
        lambda: any(e.verb == "watch" and e.code == 503 for e in dev.requests.entries()),
        "the informer tried to watch again",
    )


def test_an_informer_relists_after_410_gone(dev: DevCluster) -> None:
    assert dev.faults is not None
    kube.create(EVENT, NAMESPACE, event("kept"))
    handler = Recorder()
    informer = watching(handler, max_backoff=0.5)
    try:
        watch_down(dev)
        # While its watch is down, the server moves on and compacts its history.
        kube.delete(EVENT, NAMESPACE, "kept")
        kube.create(EVENT, NAMESPACE, event("moves-on"))
        kube.delete(EVENT, NAMESPACE, "moves-on")
        compact(dev)
        dev.faults.clear()
        handler.wait_for(lambda: len(handler.replacements) == 2)
        assert informer.lists == 2
        assert handler.replacements[-1] == set()
        # The deletion happened while no watch was open: the new list tells it by absence,
        # and the informer reports it as an event all the same.
        assert handler.events == [("DELETED", "kept")]
    finally:
        informer.stop()


def test_a_dropped_connection_resumes_from_the_last_version(dev: DevCluster) -> None:
    assert dev.faults is not None
    handler = Recorder()
    informer = watching(handler, max_backoff=0.5)
    try:
        assert informer.healthy
        watch_down(dev)
        assert not informer.healthy  # what it holds may be behind while it cannot watch
        kube.create(EVENT, NAMESPACE, event("during"))  # while no watch is open
        dev.faults.clear()
        handler.wait_for(lambda: ("ADDED", "during") in handler.events)
        assert informer.lists == 1  # resumed from its version: no second list
        assert informer.watches >= 2
        assert informer.healthy
    finally:
        informer.stop()


def test_watches_are_bounded_and_reopened(dev: DevCluster) -> None:
    handler = Recorder()
    informer = watching(handler, timeout_seconds=1)
    try:
        wait_until(lambda: informer.watches >= 3, "the informer opened its third watch")
        assert informer.lists == 1
        watches = [e for e in dev.requests.entries() if e.verb == "watch"]
        assert len(watches) >= 2
        assert all("timeoutSeconds=1" in e.path for e in watches)
        kube.create(EVENT, NAMESPACE, event("late"))
        handler.wait_for(lambda: ("ADDED", "late") in handler.events)
    finally:
        informer.stop()


def test_stop_ends_the_thread_promptly(dev: DevCluster) -> None:
    informer = watching(Recorder())
    informer.stop()
    # Its watch would run for 300 s; stop() waits for the thread 5 s at most.
    assert informer._thread is not None
    assert not informer._thread.is_alive()


def test_an_optional_kind_the_cluster_does_not_serve_is_empty_and_healthy(dev: DevCluster):
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
        # A kind that must be served is a failure when it is not: its list fails, and it is
        # never synced.
        wait_until(lambda: required.failing, "the required informer's list failed")
        assert not required.healthy
        assert not required.synced.is_set()
        assert required.lists == 0
    finally:
        required.stop()
