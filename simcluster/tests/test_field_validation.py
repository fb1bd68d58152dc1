"""Unknown fields over raw HTTP, as a real 1.34-1.36 server answers them: server-side apply fails
in the field manager whatever fieldValidation says (500, no reason, structured-merge-diff's
paths), for built-ins and custom resources alike; a custom resource's create, update and patch
follow fieldValidation as a built-in's do (Warn, the default: pruned with a Warning header each;
Strict: refused; Ignore: pruned silently)."""

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


# -- custom resources: create, update and patch --------------------------------------------------


@pytest.mark.parametrize("directive", ["", "?fieldValidation=Warn"])
def test_a_custom_resource_with_unknown_fields_is_pruned_with_a_warning_each_when_warn(
    sim: SimCluster, namespace: str, directive: str
) -> None:
    name = _unique("warned")
    body = _sprocket(name, namespace, bogus=1, another={"x": 1})
    body["metadata"]["bogus"] = "x"

    code, created, warnings = _send(sim, "POST", _sprockets(namespace) + directive, body)
    body = {**created, "spec": {**created["spec"], "later": True}}
    updated_code, _, update_warnings = _send(
        sim, "PUT", f"{_sprockets(namespace)}/{name}{directive}", body
    )

    assert code == 201
    assert warnings == [
        '299 - "unknown field \\"metadata.bogus\\""',
        '299 - "unknown field \\"spec.another\\""',
        '299 - "unknown field \\"spec.bogus\\""',
    ]
    assert created["spec"] == {"size": 1, "color": "red"}
    assert "bogus" not in created["metadata"]
    assert (updated_code, update_warnings) == (200, ['299 - "unknown field \\"spec.later\\""'])


def test_a_custom_resource_patch_with_an_unknown_field_warns_when_warn(
    sim: SimCluster, namespace: str
) -> None:
    name = _unique("patched")
    assert _send(sim, "POST", _sprockets(namespace), _sprocket(name, namespace))[0] == 201

    code, patched, warnings = _send(
        sim,
        "PATCH",
        f"{_sprockets(namespace)}/{name}",
        {"spec": {"bogus": 1}},
        "application/merge-patch+json",
    )

    assert (code, warnings) == (200, ['299 - "unknown field \\"spec.bogus\\""'])
    assert "bogus" not in patched["spec"]


def test_a_custom_resource_with_unknown_fields_is_refused_when_strict(
    sim: SimCluster, namespace: str
) -> None:
    name = _unique("strict")
    path = f"{_sprockets(namespace)}?fieldValidation=Strict"
    body = _sprocket(name, namespace, zeta=1, alpha=2)
    body["metadata"]["bogus"] = "x"
    assert _send(sim, "POST", _sprockets(namespace), _sprocket(name, namespace))[0] == 201

    code, status, warnings = _send(
        sim, "POST", path, {**body, "metadata": {**body["metadata"], "name": name + "-2"}}
    )
    patch_code, patch_status, _ = _send(
        sim,
        "PATCH",
        f"{_sprockets(namespace)}/{name}?fieldValidation=Strict",
        {"spec": {"bogus": 1}},
        "application/merge-patch+json",
    )

    assert code == 400
    assert status["reason"] == "BadRequest"
    assert status["message"] == (
        f'{KIND} in version "{VERSION}" cannot be handled as a {KIND}: strict decoding error: '
        'unknown field "metadata.bogus", unknown field "spec.alpha", unknown field "spec.zeta"'
    )
    assert warnings == []
    assert patch_code == 422
    [patch_cause] = patch_status["details"]["causes"]
    assert patch_cause["field"] == "patch"
    assert patch_cause["message"].endswith('strict decoding error: unknown field "spec.bogus"')


def test_a_custom_resource_with_unknown_fields_is_pruned_silently_when_ignore(
    sim: SimCluster, namespace: str
) -> None:
    name = _unique("ignored")
    body = _sprocket(name, namespace, bogus=1)
    body["metadata"]["bogus"] = "x"

    code, created, warnings = _send(
        sim, "POST", f"{_sprockets(namespace)}?fieldValidation=Ignore", body
    )

    assert (code, warnings) == (201, [])
    assert "bogus" not in created["spec"]
    assert "bogus" not in created["metadata"]
