"""CustomResourceDefinitions: serving the kind, schema validation and pruning, status subresource,
printer columns and removal of the kind with its CRD."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from simcluster.cluster import SimCluster

GROUP = "sim.example.com"
VERSION = "v1"
PLURAL = "widgets"


def widget_crd(
    scope: str = "Namespaced", plural: str = PLURAL, kind: str = "Widget"
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {
                                        "size": {"type": "integer", "minimum": 1},
                                        "color": {
                                            "type": "string",
                                            "enum": ["red", "blue"],
                                            "default": "red",
                                        },
                                        "extra": {
                                            "type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True,
                                        },
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {"phase": {"type": "string"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def widgets(sim: SimCluster) -> Iterator[None]:
    sim.store.create("customresourcedefinitions", widget_crd())
    sim.store.create("namespaces", {"metadata": {"name": "widgets"}})
    yield
    sim.store.delete("customresourcedefinitions", None, f"{PLURAL}.{GROUP}")
    sim.store.delete("namespaces", None, "widgets")


def _widget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec,
    }


def _objects(kube_api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_api)


def _discovered(sim: SimCluster) -> set[str]:
    try:
        with urllib.request.urlopen(f"{sim.url}/apis/{GROUP}/{VERSION}", timeout=10) as response:
            return {resource["name"] for resource in json.loads(response.read())["resources"]}
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise
        return set()


def test_crd_created_with_client_serves_its_kind(
    sim: SimCluster, kube_api: client.ApiClient
) -> None:
    extensions = client.ApiextensionsV1Api(kube_api)
    crd = extensions.create_custom_resource_definition(
        widget_crd(plural="gadgets", kind="Gadget", scope="Cluster")
    )
    objects = _objects(kube_api)

    created = objects.create_cluster_custom_object(
        GROUP, VERSION, "gadgets", {**_widget("g1", size=1), "kind": "Gadget"}
    )
    listed = objects.list_cluster_custom_object(GROUP, VERSION, "gadgets")

    assert "gadgets" in _discovered(sim)
    assert crd.status.accepted_names.kind == "Gadget"
    assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    assert created["metadata"]["uid"]
    assert listed["kind"] == "GadgetList"
    assert [item["metadata"]["name"] for item in listed["items"]] == ["g1"]

    extensions.delete_custom_resource_definition("gadgets.sim.example.com")
    assert "gadgets" not in _discovered(sim)
    with pytest.raises(ApiException) as exc_info:
        objects.list_cluster_custom_object(GROUP, VERSION, "gadgets")
    assert exc_info.value.status == 404


@pytest.mark.usefixtures("widgets")
def test_custom_object_is_defaulted_and_pruned(kube_api: client.ApiClient) -> None:
    body = _widget("pruned", size=2, unknown="dropped", extra={"anything": {"goes": 1}})

    created = _objects(kube_api).create_namespaced_custom_object(
        GROUP, VERSION, "widgets", PLURAL, body
    )

    assert created["spec"] == {"size": 2, "color": "red", "extra": {"anything": {"goes": 1}}}
    assert created["metadata"]["generation"] == 1


@pytest.mark.usefixtures("widgets")
def test_custom_object_violating_schema_is_invalid(kube_api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as exc_info:
        _objects(kube_api).create_namespaced_custom_object(
            GROUP, VERSION, "widgets", PLURAL, _widget("bad", size="big", color="green")
        )

    status = json.loads(exc_info.value.body)
    assert exc_info.value.status == 422
    assert status["reason"] == "Invalid"
    assert status["message"].startswith('Widget.sim.example.com "bad" is invalid: [')
    assert {cause["field"] for cause in status["details"]["causes"]} == {"spec.size", "spec.color"}


@pytest.mark.usefixtures("widgets")
def test_unknown_field_refused_when_field_validation_is_strict(sim: SimCluster) -> None:
    request = urllib.request.Request(
        f"{sim.url}/apis/{GROUP}/{VERSION}/namespaces/widgets/{PLURAL}?fieldValidation=Strict",
        data=json.dumps(_widget("strict", size=1, bogus=True)).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as exc_info:
        urllib.request.urlopen(request, timeout=10)

    status = json.loads(exc_info.value.read())
    assert exc_info.value.code == 400
    assert 'unknown field "spec.bogus"' in status["message"]


@pytest.mark.usefixtures("widgets")
def test_status_subresource_splits_spec_and_status(kube_api: client.ApiClient) -> None:
    objects = _objects(kube_api)
    objects.create_namespaced_custom_object(
        GROUP, VERSION, "widgets", PLURAL, _widget("split", size=1)
    )

    main = objects.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "widgets",
        PLURAL,
        "split",
        {"spec": {"size": 3}, "status": {"phase": "Ready"}},
    )
    status = objects.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "widgets",
        PLURAL,
        "split",
        {"spec": {"size": 9}, "status": {"phase": "Ready"}},
    )

    assert main["spec"]["size"] == 3
    assert "status" not in main
    assert main["metadata"]["generation"] == 2
    assert status["spec"]["size"] == 3
    assert status["status"] == {"phase": "Ready"}
    assert status["metadata"]["generation"] == 2


@pytest.mark.usefixtures("widgets")
def test_printer_columns_in_table(sim: SimCluster) -> None:
    sim.store.create(
        "widgets.sim.example.com",
        {
            **_widget("printed", size=4),
            "metadata": {"name": "printed", "namespace": "widgets"},
            "status": {"phase": "Ready"},
        },
        internal=True,
    )
    request = urllib.request.Request(
        f"{sim.url}/apis/{GROUP}/{VERSION}/namespaces/widgets/{PLURAL}/printed",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        table = json.loads(response.read())

    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size", "Phase", "Age"]
    assert table["rows"][0]["cells"][:3] == ["printed", 4, "Ready"]


def test_crd_name_must_match_plural_and_group(kube_api: client.ApiClient) -> None:
    crd = widget_crd(plural=f"things{uuid.uuid4().hex[:4]}")
    crd["metadata"]["name"] = "wrong.sim.example.com"

    with pytest.raises(ApiException) as exc_info:
        client.ApiextensionsV1Api(kube_api).create_custom_resource_definition(crd)

    assert exc_info.value.status == 422
    assert json.loads(exc_info.value.body)["details"]["causes"][0]["field"] == "metadata.name"
