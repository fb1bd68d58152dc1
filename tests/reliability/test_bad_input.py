"""Hostile and malformed input gets a clear 4xx in the envelope and creates nothing."""

from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from rest_framework.test import APIClient
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance
from schemathesis.specs.openapi.checks import negative_data_rejection

from catalog.tests.factories import PackageFactory
from runtime.models import GPUUnit, Operation
from tenancy.tests.factories import TenantFactory, key_for

BASE = {
    "operationID": "op-1",
    "name": "demo",
    "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
    "image": "python:3.12",
}
ODD = ["\u0000", "\ud800", "é", "🚀", "\u202e", "a\nb", " ", "x" * 10_000, "Ǆ", "\ufeff"]


@pytest.fixture
def key(db):
    PackageFactory(article=True)
    return key_for(TenantFactory())


@pytest.fixture
def client(key):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def post_json(client: APIClient, body: dict):
    # json.dumps escapes lone surrogates and NULs the way a hostile client would send them.
    return client.generic(
        "POST", "/api/v1/gpu-units", json.dumps(body), content_type="application/json"
    )


def assert_rejected(response, status: int = 400) -> None:
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"]
    assert not GPUUnit.objects.exists()
    assert not Operation.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["operationID", "name", "packageID", "image"])
@pytest.mark.parametrize("odd", ODD, ids=lambda s: repr(s)[:12])
def test_odd_unicode_in_every_string_field(client, field, odd):
    assert_rejected(post_json(client, {**BASE, field: odd}))


@pytest.mark.django_db
@pytest.mark.parametrize("odd", ODD, ids=lambda s: repr(s)[:12])
def test_odd_unicode_in_the_template(client, odd):
    template = {"command": [odd], "env": [{"name": "X", "value": odd}]}
    response = post_json(client, {**BASE, "template": template})
    if odd in ("\u0000", "\ud800", "x" * 10_000):
        assert_rejected(response)
    else:
        assert response.status_code == 201  # ordinary Unicode is a fine argument


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "accepted"),
    [
        ("n" * 54, True),
        ("n" * 55, False),
        ("has.dot", False),
        ("UPPER-case", True),
        ("-x", False),
        ("x_y", False),
    ],
)
def test_name_rules(client, name, accepted):
    response = client.post("/api/v1/gpu-units", {**BASE, "name": name}, format="json")
    if accepted:
        assert response.status_code == 201
        assert response.json()["data"]["name"] == name.lower()
    else:
        assert_rejected(response)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "image", ["", "python:", "Python:3", "a b", "http://evil/x", "x@sha256:1", ":latest", "/x"]
)
def test_invalid_image_references(client, image):
    assert_rejected(client.post("/api/v1/gpu-units", {**BASE, "image": image}, format="json"))


@pytest.mark.django_db
def test_registry_allow_list_is_enforced(client, settings):
    settings.IMAGE_REGISTRY_ALLOWLIST = ["ghcr.io"]
    response = client.post("/api/v1/gpu-units", {**BASE, "image": "python:3.12"}, format="json")
    assert_rejected(response)
    assert "ghcr.io" in response.json()["error"]["details"]["fields"]["image"][0]
    allowed = {**BASE, "image": "ghcr.io/acme/trainer:v1"}
    assert client.post("/api/v1/gpu-units", allowed, format="json").status_code == 201


@pytest.mark.django_db
def test_oversized_body_is_413(client):
    huge = {**BASE, "template": {"args": ["x" * 4000] * 20}}
    assert_rejected(client.post("/api/v1/gpu-units", huge, format="json"), 413)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", "hello"),
        ("application/x-www-form-urlencoded", "name=x"),
        ("multipart/form-data; boundary=x", "--x--"),
        ("application/xml", "<a/>"),
    ],
)
def test_wrong_content_types_are_415(client, content_type, body):
    response = client.generic("POST", "/api/v1/gpu-units", body, content_type=content_type)
    assert_rejected(response, 415)


@pytest.mark.django_db
@pytest.mark.parametrize("body", ["[]", '"x"', "null", "1", '{"operationID": ', "{}" * 3])
def test_json_that_is_not_an_object(client, body):
    response = client.generic("POST", "/api/v1/gpu-units", body, content_type="application/json")
    assert_rejected(response)


@pytest.mark.django_db
def test_reused_operation_ids_across_tenants_are_independent(client):
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(TenantFactory())}")
    assert client.post("/api/v1/gpu-units", BASE, format="json").status_code == 201
    response = other.post("/api/v1/gpu-units", {**BASE, "image": "busybox"}, format="json")
    assert response.status_code == 201  # another tenant's operationID is not a conflict
    assert GPUUnit.objects.count() == 2


# --- property-based: every documented operation, generated inputs, against a live server ---


def _exerciser(operation, headers: dict, calls: dict[str, int], mode: GenerationMode):
    # Schema-valid but meaningless input (an unknown package, a quota already used) is rightly
    # a 4xx, so "positive data must be accepted" is not one of the checks; and the server may
    # accept what the schema leaves out (an empty filter reads as none), so "negative data must
    # be rejected" is not either. What is checked either way: no 5xx, and every status, content
    # type, header and body is one the schema documents.
    excluded = [positive_data_acceptance, negative_data_rejection]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def exercise(case) -> None:
        case.call_and_validate(headers=headers, excluded_checks=excluded)
        calls[f"{mode.value} {operation.label}"] = (
            calls.get(f"{mode.value} {operation.label}", 0) + 1
        )

    return exercise


@pytest.mark.django_db(transaction=True)
def test_api_conforms_to_its_schema(live_server, record):
    """No 5xx, and every status, content type and body is the one the schema documents, for
    generated input that follows the schema and for input that breaks it (schemathesis's
    positive and negative generation over every operation)."""
    PackageFactory(article=True)
    headers = {"Authorization": f"Bearer {key_for(TenantFactory(is_operator=True))}"}
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/")
    calls: dict[str, int] = {}
    nothing_to_break = []
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for result in schema.get_all_operations():
            operation = result.ok()
            try:
                _exerciser(operation, headers, calls, mode)()
            except Unsatisfiable:
                # No parameter or body of the operation can be made invalid (a bare GET).
                if mode is GenerationMode.POSITIVE:
                    raise
                nothing_to_break.append(operation.label)
    positive = {label: n for label, n in calls.items() if label.startswith("positive ")}
    negative = {label: n for label, n in calls.items() if label.startswith("negative ")}
    assert len(positive) >= 8, calls  # every operation was exercised
    assert len(negative) + len(nothing_to_break) == len(positive), (negative, nothing_to_break)
    record(
        operations=len(positive),
        calls=sum(positive.values()),
        negative_calls=sum(negative.values()),
        operations_with_nothing_to_break=sorted(nothing_to_break),
        server_errors=0,
        schema_violations=0,
    )
