"""Unknown fields over raw HTTP, as a real 1.34-1.36 server answers them: server-side apply fails
in the field manager whatever fieldValidation says (500, no reason, structured-merge-diff's
paths), for built-ins and custom resources alike."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from simcluster.cluster import SimCluster
from simcluster.tests.test_crd import GROUP, VERSION, widget_crd

PLURAL, KIND = "sprockets", "Sprocket"
APPLY = "application/apply-patch+yaml"
DIRECTIVES = ["", "&fieldValidation=Strict", "&fieldValidation=Warn", "&fieldValidation=Ignore"]


@pytest.fixture(scope="module")
def namespace(sim: SimCluster) -> Iterator[str]:
    name = f"fv-{uuid.uuid4().hex[:8]}"
    sim.store.create("namespaces", {"metadata": {"name": name}})
    sim.store.create("customresourcedefinitions", widget_crd(plural=PLURAL, kind=KIND))
    yield name
    sim.store.delete("customresourcedefinitions", None, f"{PLURAL}.{GROUP}")
    sim.store.delete("namespaces", None, name)


def _send(
    sim: SimCluster,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
) -> tuple[int, dict[str, Any], list[str]]:
    request = urllib.request.Request(
        sim.url + path,
        data=json.dumps(body).encode() if body is not None else None,
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


def _sprocket(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": 1, **spec},
    }


def _sprockets(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- server-side apply -------------------------------------------------------------------------


@pytest.mark.parametrize("directive", DIRECTIVES)
def test_apply_of_a_built_in_with_an_unknown_field_fails_whatever_the_directive(
    sim: SimCluster, namespace: str, directive: str
) -> None:
    name = _unique("applied")
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"a": "1"},
        "bogus": True,
    }
    path = f"/api/v1/namespaces/{namespace}/configmaps/{name}?fieldManager=test{directive}"

    code, status, warnings = _send(sim, "PATCH", path, config_map, APPLY)
    missing, _, _ = _send(sim, "GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    assert code == 500
    assert "reason" not in status
    assert status["message"] == (
        f"failed to create typed patch object ({namespace}/{name}; /v1, Kind=ConfigMap): "
        ".bogus: field not declared in schema"
    )
    assert warnings == []
    assert missing == 404


def test_apply_to_an_existing_object_names_each_undeclared_field_by_its_list_keys(
    sim: SimCluster, namespace: str
) -> None:
    name = _unique("svc")
    service: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}]},
    }
    path = f"/api/v1/namespaces/{namespace}/services/{name}?fieldManager=test"
    assert _send(sim, "PATCH", path, service, APPLY)[0] == 201
    service["spec"]["ports"][0]["bogus"] = 1
    service["spec"]["colour"] = "red"

    code, status, _ = _send(sim, "PATCH", path + "&fieldValidation=Ignore", service, APPLY)
    _, stored, _ = _send(sim, "GET", f"/api/v1/namespaces/{namespace}/services/{name}")

    assert code == 500
    assert status["message"] == (
        f"failed to create typed patch object ({namespace}/{name}; /v1, Kind=Service): errors:\n"
        '  .spec.ports[port=80,protocol="TCP"].bogus: field not declared in schema\n'
        "  .spec.colour: field not declared in schema"
    )
    assert "bogus" not in stored["spec"]["ports"][0]


@pytest.mark.parametrize("directive", DIRECTIVES)
def test_apply_of_a_custom_resource_with_an_undeclared_field_fails_whatever_the_directive(
    sim: SimCluster, namespace: str, directive: str
) -> None:
    name = _unique("sprocket")
    path = f"{_sprockets(namespace)}/{name}?fieldManager=test{directive}"
    kept = _sprocket(name, namespace, extra={"anything": {"goes": 1}})

    code, status, warnings = _send(sim, "PATCH", path, _sprocket(name, namespace, bogus=1), APPLY)
    kept_code, created, _ = _send(sim, "PATCH", path, kept, APPLY)

    assert code == 500
    assert "reason" not in status
    assert status["message"] == (
        f"failed to create typed patch object ({namespace}/{name}; {GROUP}/{VERSION}, "
        f"Kind={KIND}): .spec.bogus: field not declared in schema"
    )
    assert warnings == []
    # Under x-kubernetes-preserve-unknown-fields anything goes.
    assert kept_code == 201
    assert created["spec"]["extra"] == {"anything": {"goes": 1}}
