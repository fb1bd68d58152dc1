"""What an informer relies on, as the real API server serves it: paginated lists (`limit`,
`continue`, one consistent snapshot per list, 410 Expired once compacted), watch bookmarks
(`allowWatchBookmarks`) and 410 Gone for a watch from a compacted version."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from simcluster.cluster import SimCluster


@pytest.fixture
def namespace(kube_api: client.ApiClient) -> Iterator[str]:
    name = f"lw-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(kube_api).create_namespace({"metadata": {"name": name}})
    yield name
    client.CoreV1Api(kube_api).delete_namespace(name)


def _event(namespace: str, name: str, **labels: str) -> dict:
    # Events: a served kind no controller of the simulated cluster touches.
    return {
        "metadata": {"name": name, "labels": labels},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": namespace},
        "reason": "Probe",
        "message": "list and watch",
    }


def _events(kube_api: client.ApiClient, namespace: str, count: int) -> client.CoreV1Api:
    core = client.CoreV1Api(kube_api)
    for index in range(count):
        core.create_namespaced_event(namespace, _event(namespace, f"ev-{index:02d}", app="x"))
    return core


def test_limit_and_continue_page_through_one_snapshot(
    kube_api: client.ApiClient, namespace: str
) -> None:
    core = _events(kube_api, namespace, 5)
    first = core.list_namespaced_event(namespace, limit=2)
    assert [c.metadata.name for c in first.items] == ["ev-00", "ev-01"]
    assert first.metadata.remaining_item_count == 3
    token = first.metadata._continue
    assert token
    # Writes after the first page do not show in the rest of this list.
    core.delete_namespaced_event("ev-03", namespace)
    core.create_namespaced_event(namespace, _event(namespace, "ev-99"))
    second = core.list_namespaced_event(namespace, limit=2, _continue=token)
    assert [c.metadata.name for c in second.items] == ["ev-02", "ev-03"]
    assert second.metadata.resource_version == first.metadata.resource_version
    third = core.list_namespaced_event(namespace, limit=2, _continue=second.metadata._continue)
    assert [c.metadata.name for c in third.items] == ["ev-04"]
    assert third.metadata._continue is None
    assert third.metadata.remaining_item_count is None


def test_selectors_page_without_a_remaining_count(
    kube_api: client.ApiClient, namespace: str
) -> None:
    core = _events(kube_api, namespace, 3)
    page = core.list_namespaced_event(namespace, limit=1, label_selector="app=x")
    assert len(page.items) == 1
    assert page.metadata._continue
    assert page.metadata.remaining_item_count is None


def test_a_list_without_limit_has_no_continue(kube_api: client.ApiClient, namespace: str) -> None:
    core = _events(kube_api, namespace, 3)
    listed = core.list_namespaced_event(namespace)
    assert len(listed.items) == 3
    assert listed.metadata._continue is None


def test_a_continue_token_from_before_a_compaction_is_410_expired(
    sim: SimCluster, kube_api: client.ApiClient, namespace: str
) -> None:
    core = _events(kube_api, namespace, 3)
    token = core.list_namespaced_event(namespace, limit=1).metadata._continue
    core.create_namespaced_event(namespace, _event(namespace, "after"))
    sim.store.compact()
    with pytest.raises(ApiException) as refused:
        core.list_namespaced_event(namespace, limit=1, _continue=token)
    assert refused.value.status == 410
    assert json.loads(refused.value.body)["reason"] == "Expired"


def test_a_forged_continue_token_is_400(kube_api: client.ApiClient, namespace: str) -> None:
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(kube_api).list_namespaced_event(namespace, _continue="!!not-ours")
    assert refused.value.status == 400


def test_a_continue_token_serves_only_the_list_that_issued_it(
    kube_api: client.ApiClient, namespace: str
) -> None:
    core = _events(kube_api, namespace, 3)
    token = core.list_namespaced_event(namespace, limit=1).metadata._continue
    with pytest.raises(ApiException) as other_selector:
        core.list_namespaced_event(namespace, limit=1, _continue=token, label_selector="app=x")
    assert other_selector.value.status == 400
    with pytest.raises(ApiException) as other_kind:
        client.CoreV1Api(kube_api).list_namespaced_pod(namespace, limit=1, _continue=token)
    assert other_kind.value.status == 400


def _watch(url: str) -> list[dict]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return [json.loads(line) for line in response.read().splitlines() if line.strip()]


def test_bookmarks_come_periodically_and_before_the_timeout(
    sim: SimCluster, kube_api: client.ApiClient, namespace: str
) -> None:
    core = _events(kube_api, namespace, 1)
    version = core.list_namespaced_event(namespace).metadata.resource_version
    previous = sim._server.bookmark_interval
    sim._server.bookmark_interval = 0.3
    try:
        events = _watch(
            f"{sim.url}/api/v1/namespaces/{namespace}/events?watch=1&"
            f"resourceVersion={version}&allowWatchBookmarks=true&timeoutSeconds=1"
        )
        without = _watch(
            f"{sim.url}/api/v1/namespaces/{namespace}/events?watch=1&"
            f"resourceVersion={version}&timeoutSeconds=1"
        )
    finally:
        sim._server.bookmark_interval = previous
    assert events
    assert {event["type"] for event in events} == {"BOOKMARK"}
    for event in events:
        assert event["object"]["kind"] == "Event"
        assert int(event["object"]["metadata"]["resourceVersion"]) >= int(version)
    assert without == []


def test_a_watch_from_a_compacted_version_is_410_gone(
    sim: SimCluster, kube_api: client.ApiClient, namespace: str
) -> None:
    core = _events(kube_api, namespace, 1)
    version = core.list_namespaced_event(namespace).metadata.resource_version
    core.create_namespaced_event(namespace, _event(namespace, "later"))
    core.create_namespaced_event(namespace, _event(namespace, "later-still"))
    sim.store.compact(int(version) + 1)
    events = _watch(
        f"{sim.url}/api/v1/namespaces/{namespace}/events?watch=1&"
        f"resourceVersion={version}&timeoutSeconds=1"
    )
    # As the real server: HTTP 200, then one ERROR event carrying a 410 Status.
    assert [event["type"] for event in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"{sim.url}/api/v1/namespaces/{namespace}/events?limit=x")
