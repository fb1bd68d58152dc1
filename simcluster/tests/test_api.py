"""The simulated API server through the official kubernetes client: CRUD, errors, selectors,
patches, watch, garbage collection, finalizers and fault injection."""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client import ApiException

from simcluster.cluster import SimCluster
from simcluster.faults import FaultInjector, RequestLog
from simcluster.server import SimServer
from simcluster.store import Store


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def namespace(kube_api: client.ApiClient) -> Iterator[str]:
    name = _name("ns")
    client.CoreV1Api(kube_api).create_namespace({"metadata": {"name": name}})
    yield name
    client.CoreV1Api(kube_api).delete_namespace(name)


def _pod(name: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "labels": extra.pop("labels", {})},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **extra},
    }
    return body


def _claim(name: str, device_class: str = "gpu.example.com", count: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": device_class, "count": count}}
                ]
            }
        },
    }


def _error(exc_info: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return json.loads(exc_info.value.body)


def _raw(
    sim: SimCluster,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
) -> tuple[int, dict]:
    """A request the typed client would refuse to send (it validates bodies with pydantic)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        sim.url + path, data=data, method=method, headers={"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_crud_of_builtin_kinds_when_using_the_official_client(
    kube_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    resource = client.ResourceV1Api(kube_api)
    class_name = f"{_name('gpu')}.example.com"

    device_class = resource.create_device_class({"metadata": {"name": class_name}, "spec": {}})
    claim = resource.create_namespaced_resource_claim(namespace, _claim("claim-a", class_name))
    pod = core.create_namespaced_pod(namespace, _pod("pod-a"))

    assert device_class.metadata.uid
    assert device_class.metadata.resource_version
    assert claim.metadata.generation == 1
    assert claim.spec.devices.requests[0].exactly.allocation_mode == "ExactCount"
    assert pod.status.phase == "Pending"
    assert pod.spec.restart_policy == "Always"
    assert int(pod.metadata.resource_version) > int(claim.metadata.resource_version)
    assert core.read_namespace(namespace).status.phase == "Active"
    assert (
        resource.read_namespaced_resource_claim("claim-a", namespace).metadata.uid
        == claim.metadata.uid
    )
    assert [c.metadata.name for c in resource.list_namespaced_resource_claim(namespace).items] == [
        "claim-a"
    ]

    device_class.metadata.labels = {"tier": "gold"}
    replaced = resource.replace_device_class(class_name, device_class)
    assert replaced.metadata.labels == {"tier": "gold"}
    assert replaced.metadata.generation == 1  # metadata changes do not bump generation

    deleted = resource.delete_namespaced_resource_claim("claim-a", namespace)
    assert deleted.metadata.name == "claim-a"
    core.delete_namespaced_pod("pod-a", namespace)
    resource.delete_device_class(class_name)
    with pytest.raises(ApiException) as missing:
        resource.read_device_class(class_name)
    assert missing.value.status == 404


def test_not_found_when_object_is_missing(kube_api: client.ApiClient, namespace: str) -> None:
    with pytest.raises(ApiException) as exc_info:
        client.ResourceV1Api(kube_api).read_namespaced_resource_claim("nope", namespace)

    status = _error(exc_info)
    assert exc_info.value.status == 404
    assert status["reason"] == "NotFound"
    assert status["message"] == 'resourceclaims.resource.k8s.io "nope" not found'


def test_create_is_refused_when_namespace_is_missing(kube_api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as exc_info:
        client.CoreV1Api(kube_api).create_namespaced_pod("no-such-ns", _pod("p"))

    assert exc_info.value.status == 404
    assert _error(exc_info)["message"] == 'namespaces "no-such-ns" not found'


def test_already_exists_when_creating_twice(kube_api: client.ApiClient, namespace: str) -> None:
    resource = client.ResourceV1Api(kube_api)
    resource.create_namespaced_resource_claim(namespace, _claim("twice"))

    with pytest.raises(ApiException) as exc_info:
        resource.create_namespaced_resource_claim(namespace, _claim("twice"))

    status = _error(exc_info)
    assert exc_info.value.status == 409
    assert status["reason"] == "AlreadyExists"
    assert status["message"] == 'resourceclaims.resource.k8s.io "twice" already exists'


def test_conflict_when_resource_version_is_stale(kube_api: client.ApiClient) -> None:
    resource = client.ResourceV1Api(kube_api)
    name = f"{_name('stale')}.example.com"
    stale = resource.create_device_class({"metadata": {"name": name}, "spec": {}})
    resource.patch_device_class(name, {"metadata": {"labels": {"a": "1"}}})

    stale.metadata.labels = {"b": "2"}
    with pytest.raises(ApiException) as exc_info:
        resource.replace_device_class(name, stale)

    status = _error(exc_info)
    assert exc_info.value.status == 409
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        f'Operation cannot be fulfilled on deviceclasses.resource.k8s.io "{name}": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    resource.delete_device_class(name)


def _send(
    sim: SimCluster,
    method: str,
    path: str,
    body: Any,
    content_type: str = "application/json",
) -> tuple[int, dict, list[str]]:
    """Like _raw, with the response's Warning headers."""
    request = urllib.request.Request(
        sim.url + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": content_type},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return (
                response.status,
                json.loads(response.read()),
                response.headers.get_all("Warning") or [],
            )
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers.get_all("Warning") or []


def _pod_with_unknown_fields(name: str) -> dict:
    pod = _pod(name)
    pod["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    pod["spec"]["foo"] = 1
    return pod


def test_strict_field_validation_refuses_unknown_fields_of_builtin_kind_with_400(
    sim: SimCluster, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods?fieldValidation=Strict"
    code, status, warnings = _send(sim, "POST", path, _pod_with_unknown_fields("strict"))
    assert code == 400
    assert status["reason"] == "BadRequest"
    assert status["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].imagePullPolicyy", unknown field "spec.foo"'
    )
    assert warnings == []
    claim = {**_claim("strict"), "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim"}
    claim["spec"]["foo"] = True
    code, status, _ = _send(
        sim,
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims?fieldValidation=Strict",
        claim,
    )
    assert (code, status["message"]) == (
        400,
        'ResourceClaim in version "v1" cannot be handled as a ResourceClaim: '
        'strict decoding error: unknown field "spec.foo"',
    )


@pytest.mark.parametrize("query", ["?fieldValidation=Warn", ""])
def test_warn_field_validation_drops_unknown_fields_with_a_warning_each_when_warn_or_absent(
    sim: SimCluster, namespace: str, query: str
) -> None:
    name = _name("warn")
    path = f"/api/v1/namespaces/{namespace}/pods{query}"
    code, created, warnings = _send(sim, "POST", path, _pod_with_unknown_fields(name))
    assert code == 201
    assert warnings == [
        '299 - "unknown field \\"spec.containers[0].imagePullPolicyy\\""',
        '299 - "unknown field \\"spec.foo\\""',
    ]
    assert "foo" not in created["spec"]
    assert "imagePullPolicyy" not in created["spec"]["containers"][0]


def test_ignore_field_validation_drops_unknown_fields_silently(
    sim: SimCluster, namespace: str
) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": _name("ignore")},
        "spec": {"ports": [{"port": 80, "bogus": 1}], "foo": "x"},
    }
    path = f"/api/v1/namespaces/{namespace}/services?fieldValidation=Ignore"
    code, created, warnings = _send(sim, "POST", path, service)
    assert (code, warnings) == (201, [])
    assert "foo" not in created["spec"]
    assert "bogus" not in created["spec"]["ports"][0]


def test_strict_field_validation_refuses_a_patch_adding_unknown_fields_with_422(
    sim: SimCluster, namespace: str
) -> None:
    name = _name("patched")
    assert _send(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", _pod(name))[0] == 201
    item = f"/api/v1/namespaces/{namespace}/pods/{name}?fieldValidation=Strict"
    code, status, _ = _send(
        sim, "PATCH", item, {"spec": {"foo": 1}}, "application/strategic-merge-patch+json"
    )
    assert code == 422
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "patch",
            "message": 'Invalid value: "map[spec:map[foo:1]]": strict decoding error: '
            'unknown field "spec.foo"',
        }
    ]
    code, status, _ = _send(
        sim, "PATCH", item, {"spec": {"foo": 1}}, "application/merge-patch+json"
    )
    assert code == 422
    assert status["message"].endswith('strict decoding error: unknown field "spec.foo"')
    code, _, warnings = _send(
        sim,
        "PATCH",
        item.replace("Strict", "Warn"),
        {"spec": {"foo": 1}},
        "application/merge-patch+json",
    )
    assert (code, warnings) == (200, ['299 - "unknown field \\"spec.foo\\""'])


def test_invalid_when_builtin_has_bad_values(
    sim: SimCluster, kube_api: client.ApiClient, namespace: str
) -> None:
    pod = _pod("bad-port")
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": "eighty"}]
    code, status = _raw(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "spec.containers[0].ports[0].containerPort"

    with pytest.raises(ApiException) as exc_info:
        client.CoreV1Api(kube_api).create_namespace({"metadata": {"name": "Not_A_Label"}})
    assert exc_info.value.status == 422
    assert _error(exc_info)["message"].startswith(
        'Namespace "Not_A_Label" is invalid: metadata.name: Invalid value'
    )

    claim = _claim("zero")
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 0
    with pytest.raises(ApiException) as exc_info:
        client.ResourceV1Api(kube_api).create_namespaced_resource_claim(namespace, claim)
    assert (
        _error(exc_info)["details"]["causes"][0]["field"]
        == "spec.devices.requests[0].exactly.count"
    )


def test_resource_claim_spec_is_immutable(kube_api: client.ApiClient, namespace: str) -> None:
    resource = client.ResourceV1Api(kube_api)
    resource.create_namespaced_resource_claim(namespace, _claim("fixed", count=1))

    patch = {
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}}
                ]
            }
        }
    }
    with pytest.raises(ApiException) as exc_info:
        resource.patch_namespaced_resource_claim("fixed", namespace, patch)

    status = _error(exc_info)
    assert exc_info.value.status == 422
    assert status["details"]["causes"][0]["field"] == "spec"
    assert status["message"].endswith("field is immutable")
    labelled = resource.patch_namespaced_resource_claim(
        "fixed", namespace, {"metadata": {"labels": {"ok": "yes"}}}
    )
    assert labelled.metadata.labels == {"ok": "yes"}


def test_label_and_field_selectors_filter_lists(
    sim: SimCluster, kube_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    sim.store.create(
        "pods",
        {
            **_pod("on-a", labels={"app": "web", "tier": "1"}),
            "metadata": {
                "name": "on-a",
                "namespace": namespace,
                "labels": {"app": "web", "tier": "1"},
            },
            "spec": {"nodeName": "node-a", "containers": [{"name": "m", "image": "x"}]},
        },
        internal=True,
    )
    core.create_namespaced_pod(namespace, _pod("web-2", labels={"app": "web"}))
    core.create_namespaced_pod(namespace, _pod("db-1", labels={"app": "db"}))

    def names(**kwargs: Any) -> list[str]:
        return sorted(p.metadata.name for p in core.list_namespaced_pod(namespace, **kwargs).items)

    assert names(label_selector="app=web") == ["on-a", "web-2"]
    assert names(label_selector="app in (web,db),!tier") == ["db-1", "web-2"]
    assert names(label_selector="app!=web") == ["db-1"]
    assert names(label_selector="tier") == ["on-a"]
    assert names(field_selector="spec.nodeName=node-a") == ["on-a"]
    assert names(field_selector="metadata.name=db-1") == ["db-1"]
    assert names(field_selector="spec.nodeName!=node-a,status.phase=Pending") == ["db-1", "web-2"]
    with pytest.raises(ApiException) as exc_info:
        core.list_namespaced_pod(namespace, field_selector="spec.image=x")
    assert exc_info.value.status == 400
    assert _error(exc_info)["message"] == "field label not supported: spec.image"


def test_resource_slices_select_by_node_and_driver(
    sim: SimCluster, kube_api: client.ApiClient
) -> None:
    resource = client.ResourceV1Api(kube_api)
    node = _name("node")
    for driver in ("gpu.nvidia.com", "nic.example.com"):
        resource.create_resource_slice(
            {
                "metadata": {"name": f"{node}-{driver}"},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}],
                },
            }
        )

    found = resource.list_resource_slice(
        field_selector=f"spec.nodeName={node},spec.driver=gpu.nvidia.com"
    ).items

    assert [s.metadata.name for s in found] == [f"{node}-gpu.nvidia.com"]


def test_merge_patch_replaces_lists_and_null_deletes(kube_api: client.ApiClient) -> None:
    resource = client.ResourceV1Api(kube_api)
    name = f"{_name('merge')}.example.com"
    resource.create_device_class(
        {
            "metadata": {"name": name, "labels": {"a": "1", "b": "2"}},
            "spec": {"selectors": [{"cel": {"expression": "true"}}]},
        }
    )

    patched = resource.patch_device_class(
        name,
        {
            "metadata": {"labels": {"a": None, "c": "3"}},
            "spec": {"selectors": [{"cel": {"expression": "false"}}]},
        },
        _content_type="application/merge-patch+json",
    )

    assert patched.metadata.labels == {"b": "2", "c": "3"}
    assert [s.cel.expression for s in patched.spec.selectors] == ["false"]
    assert patched.metadata.generation == 2
    resource.delete_device_class(name)


def test_strategic_merge_patch_merges_containers_by_name(sim: SimCluster, namespace: str) -> None:
    pod = _pod("two")
    pod["spec"]["containers"] = [
        {"name": "a", "image": "busybox:1", "env": [{"name": "X", "value": "1"}]},
        {"name": "b", "image": "busybox:1"},
    ]
    pod["metadata"]["finalizers"] = ["example.com/keep"]
    assert _raw(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", pod)[0] == 201

    # What kubectl apply sends after an image change in the manifest.
    patch = {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/keep"]},
        "spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "b", "image": "busybox:2"}],
        },
    }
    code, patched = _raw(
        sim,
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/two",
        patch,
        "application/strategic-merge-patch+json",
    )

    assert code == 200
    assert [(c["name"], c["image"]) for c in patched["spec"]["containers"]] == [
        ("a", "busybox:1"),
        ("b", "busybox:2"),
    ]
    assert patched["spec"]["containers"][0]["env"] == [{"name": "X", "value": "1"}]
    assert not patched["metadata"].get("finalizers")


def test_json_patch_and_unsupported_patch_type(sim: SimCluster, namespace: str) -> None:
    assert _raw(sim, "POST", f"/api/v1/namespaces/{namespace}/pods", _pod("jp"))[0] == 201

    code, patched = _raw(
        sim,
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/jp",
        [{"op": "add", "path": "/metadata/labels/x", "value": "y"}],
        "application/json-patch+json",
    )
    assert code == 200
    assert patched["metadata"]["labels"] == {"x": "y"}

    code, status = _raw(sim, "PATCH", f"/api/v1/namespaces/{namespace}/pods/jp", {}, "text/plain")
    assert code == 415
    assert status["reason"] == "UnsupportedMediaType"


def test_pod_main_resource_ignores_status_and_status_subresource_ignores_spec(
    kube_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, _pod("split"))

    main = core.patch_namespaced_pod(
        "split", namespace, {"metadata": {"labels": {"x": "1"}}, "status": {"phase": "Running"}}
    )
    status = core.patch_namespaced_pod_status(
        "split", namespace, {"metadata": {"labels": {"y": "1"}}, "status": {"phase": "Running"}}
    )

    assert main.status.phase == "Pending"
    assert status.status.phase == "Running"
    assert status.metadata.labels == {"x": "1"}


def test_watch_receives_added_modified_deleted(kube_api: client.ApiClient, namespace: str) -> None:
    resource = client.ResourceV1Api(kube_api)
    resource.create_namespaced_resource_claim(namespace, _claim("sentinel"))
    events: list[tuple[str, str]] = []
    watching = threading.Event()

    def consume() -> None:
        # Client 37 cannot infer ResourceV1ResourceClaim from the list method, so name it.
        stream = watch.Watch(return_type="ResourceV1ResourceClaim")
        for event in stream.stream(
            resource.list_namespaced_resource_claim, namespace, timeout_seconds=30
        ):
            events.append((event["type"], event["object"].metadata.name))
            watching.set()  # the initial ADDED of the sentinel proves the watch is open
            if event["type"] == "DELETED":
                stream.stop()

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert watching.wait(timeout=5)
    resource.create_namespaced_resource_claim(namespace, _claim("watched"))
    resource.patch_namespaced_resource_claim(
        "watched", namespace, {"metadata": {"labels": {"x": "1"}}}
    )
    resource.delete_namespaced_resource_claim("watched", namespace)
    consumer.join(timeout=10)

    assert events == [
        ("ADDED", "sentinel"),
        ("ADDED", "watched"),
        ("MODIFIED", "watched"),
        ("DELETED", "watched"),
    ]


def test_watch_resumes_from_resource_version(kube_api: client.ApiClient, namespace: str) -> None:
    resource = client.ResourceV1Api(kube_api)
    listed = resource.list_namespaced_resource_claim(namespace)
    resource.create_namespaced_resource_claim(namespace, _claim("later"))

    stream = watch.Watch(return_type="ResourceV1ResourceClaim")
    seen = [
        (event["type"], event["object"].metadata.name)
        for event in stream.stream(
            resource.list_namespaced_resource_claim,
            namespace,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=1,
        )
    ]

    assert seen == [("ADDED", "later")]


def _owner_and_dependents(
    kube_api: client.ApiClient, namespace: str, block: bool
) -> tuple[Any, str]:
    resource = client.ResourceV1Api(kube_api)
    core = client.CoreV1Api(kube_api)
    owner = core.create_namespaced_pod(namespace, _pod("owner"))
    ref = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "owner",
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": block,
    }
    claim = _claim("owned")
    claim["metadata"]["ownerReferences"] = [ref]
    claim["metadata"]["finalizers"] = ["example.com/hold"]
    resource.create_namespaced_resource_claim(namespace, claim)
    return owner, "owned"


def test_background_deletion_collects_dependents(
    kube_api: client.ApiClient, namespace: str
) -> None:
    core, resource = client.CoreV1Api(kube_api), client.ResourceV1Api(kube_api)
    _owner_and_dependents(kube_api, namespace, block=False)

    core.delete_namespaced_pod("owner", namespace)

    claim = resource.read_namespaced_resource_claim("owned", namespace)
    assert claim.metadata.deletion_timestamp is not None  # waits for its own finalizer
    resource.patch_namespaced_resource_claim("owned", namespace, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as exc_info:
        resource.read_namespaced_resource_claim("owned", namespace)
    assert exc_info.value.status == 404


def test_foreground_deletion_keeps_owner_until_dependents_are_gone(
    kube_api: client.ApiClient, namespace: str
) -> None:
    core, resource = client.CoreV1Api(kube_api), client.ResourceV1Api(kube_api)
    _owner_and_dependents(kube_api, namespace, block=True)

    core.delete_namespaced_pod("owner", namespace, propagation_policy="Foreground")

    owner = core.read_namespaced_pod("owner", namespace)
    assert owner.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in owner.metadata.finalizers
    resource.patch_namespaced_resource_claim("owned", namespace, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as exc_info:
        core.read_namespaced_pod("owner", namespace)
    assert exc_info.value.status == 404


def test_orphan_deletion_strips_owner_references(
    kube_api: client.ApiClient, namespace: str
) -> None:
    core, resource = client.CoreV1Api(kube_api), client.ResourceV1Api(kube_api)
    _owner_and_dependents(kube_api, namespace, block=False)

    core.delete_namespaced_pod("owner", namespace, propagation_policy="Orphan")

    claim = resource.read_namespaced_resource_claim("owned", namespace)
    assert claim.metadata.deletion_timestamp is None
    assert not claim.metadata.owner_references
    resource.patch_namespaced_resource_claim("owned", namespace, {"metadata": {"finalizers": None}})


def test_finalizers_hold_deletion_until_removed(kube_api: client.ApiClient) -> None:
    resource = client.ResourceV1Api(kube_api)
    name = f"{_name('final')}.example.com"
    resource.create_device_class(
        {"metadata": {"name": name, "finalizers": ["example.com/x"]}, "spec": {}}
    )

    resource.delete_device_class(name)
    held = resource.read_device_class(name)
    with pytest.raises(ApiException) as exc_info:
        resource.patch_device_class(
            name,
            {"metadata": {"finalizers": ["example.com/x", "example.com/y"]}},
            _content_type="application/merge-patch+json",
        )
    assert exc_info.value.status == 422
    resource.patch_device_class(
        name, {"metadata": {"finalizers": []}}, _content_type="application/merge-patch+json"
    )

    assert held.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException):
        resource.read_device_class(name)


def test_namespace_deletion_removes_its_objects(kube_api: client.ApiClient) -> None:
    core, resource = client.CoreV1Api(kube_api), client.ResourceV1Api(kube_api)
    name = _name("doomed")
    core.create_namespace({"metadata": {"name": name}})
    resource.create_namespaced_resource_claim(name, _claim("inside"))

    core.delete_namespace(name)

    with pytest.raises(ApiException) as exc_info:
        core.read_namespace(name)
    assert exc_info.value.status == 404
    assert resource.list_namespaced_resource_claim(name).items == []


def test_generate_name_gives_a_unique_name(kube_api: client.ApiClient, namespace: str) -> None:
    resource = client.ResourceV1Api(kube_api)
    claim = _claim("")
    claim["metadata"] = {"generateName": "worker-gpus-"}

    first = resource.create_namespaced_resource_claim(namespace, claim)
    second = resource.create_namespaced_resource_claim(namespace, claim)

    assert first.metadata.name.startswith("worker-gpus-")
    assert len(first.metadata.name) == len("worker-gpus-") + 5
    assert first.metadata.name != second.metadata.name


def test_table_output_when_kubectl_asks(sim: SimCluster, namespace: str) -> None:
    sim.store.create(
        "resourceclaims",
        {**_claim("tabled"), "metadata": {"name": "tabled", "namespace": namespace}},
        internal=True,
    )
    request = urllib.request.Request(
        f"{sim.url}/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims?limit=500",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        table = json.loads(response.read())

    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "State", "Age"]
    assert table["rows"][0]["cells"][:2] == ["tabled", "pending"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_aggregated_discovery_only_when_asked(sim: SimCluster) -> None:
    aggregated = urllib.request.Request(
        f"{sim.url}/apis",
        headers={
            "Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
            "application/json"
        },
    )
    with urllib.request.urlopen(aggregated, timeout=10) as response:
        assert (
            response.headers["Content-Type"]
            == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        )
        groups = {item["metadata"]["name"] for item in json.loads(response.read())["items"]}
    with urllib.request.urlopen(f"{sim.url}/apis", timeout=10) as response:
        assert response.headers["Content-Type"] == "application/json"
        legacy = json.loads(response.read())

    assert {"resource.k8s.io", "apiextensions.k8s.io"} <= groups
    assert legacy["kind"] == "APIGroupList"


def test_fault_injection_returns_errors(sim: SimCluster, kube_api: client.ApiClient) -> None:
    resource = client.ResourceV1Api(kube_api)
    sim.faults.set("list", "deviceclasses", error_rate=1.0)
    sim.faults.set("create", None, error_rate=1.0, status=429)

    with pytest.raises(ApiException) as listing:
        resource.list_device_class()
    with pytest.raises(ApiException) as creating:
        resource.create_device_class({"metadata": {"name": "throttled.example.com"}, "spec": {}})
    read = resource.list_resource_slice()  # other verbs and resources are untouched

    assert listing.value.status == 500
    assert json.loads(listing.value.body)["reason"] == "InternalError"
    assert creating.value.status == 429
    assert read.kind == "ResourceSliceList"
    sim.faults.clear()
    assert resource.list_device_class().kind == "DeviceClassList"


def _without_retries(kube_api: client.ApiClient) -> client.ApiClient:
    configuration = copy.copy(kube_api.configuration)
    configuration.retries = 0
    return client.ApiClient(configuration)


def test_unreachable_switch_breaks_connections(sim: SimCluster, kube_api: client.ApiClient) -> None:
    core = client.CoreV1Api(_without_retries(kube_api))
    sim.faults.unreachable = True

    with pytest.raises(urllib3.exceptions.HTTPError):
        core.list_namespace(_request_timeout=5)

    sim.faults.unreachable = False
    assert core.list_namespace().items


def test_request_log_records_verb_resource_and_code(
    sim: SimCluster, kube_api: client.ApiClient, namespace: str
) -> None:
    sim.requests.clear()
    resource = client.ResourceV1Api(kube_api)
    resource.create_namespaced_resource_claim(namespace, _claim("logged"))
    with pytest.raises(ApiException):
        resource.read_namespaced_resource_claim("absent", namespace)

    entries = [(e.verb, e.resource, e.namespace, e.name, e.code) for e in sim.requests.entries()]

    assert ("create", "resourceclaims", namespace, None, 201) in entries
    assert ("get", "resourceclaims", namespace, "absent", 404) in entries
    assert sim.requests.count(verb="create", resource="resourceclaims") == 1


def test_timeout_fault_leaves_request_unanswered(
    sim: SimCluster, kube_api: client.ApiClient
) -> None:
    sim.faults.set("get", "namespaces", timeout=True)

    with pytest.raises(urllib3.exceptions.HTTPError, match="Read timed out"):
        client.CoreV1Api(_without_retries(kube_api)).read_namespace("default", _request_timeout=0.5)


def test_latency_fault_delays_answers(sim: SimCluster, kube_api: client.ApiClient) -> None:
    sim.faults.set(None, "namespaces", latency=0.3)

    started = time.monotonic()
    client.CoreV1Api(kube_api).read_namespace("default")

    assert time.monotonic() - started >= 0.3


def test_watch_list_ends_initial_events_with_bookmark(sim: SimCluster, namespace: str) -> None:
    sim.store.create(
        "resourceclaims",
        {**_claim("listed"), "metadata": {"name": "listed", "namespace": namespace}},
    )
    url = (
        f"{sim.url}/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
        "?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    with urllib.request.urlopen(url, timeout=10) as response:
        events = [json.loads(line) for line in response.read().splitlines() if line.strip()]

    assert [event["type"] for event in events] == ["ADDED", "BOOKMARK"]
    annotations = events[1]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}


def test_a_client_gone_mid_request_is_not_reported_as_a_server_error(capsys) -> None:
    # A stopping process's keep-alive connection reset while its handler waits for the next
    # request: the real API server logs nothing; any other failure is still reported.
    server = SimServer(("127.0.0.1", 0), Store(), FaultInjector(), RequestLog())
    try:
        for error in (ConnectionResetError(104, "reset"), BrokenPipeError(32, "pipe")):
            try:
                raise error
            except OSError:
                server.handle_error(None, ("127.0.0.1", 1))
        assert capsys.readouterr().err == ""
        try:
            raise ValueError("a handler bug")
        except ValueError:
            server.handle_error(None, ("127.0.0.1", 1))
        assert "a handler bug" in capsys.readouterr().err
    finally:
        server.server_close()
