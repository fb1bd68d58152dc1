"""Hostile and malformed input gets a clear 4xx in the envelope and creates nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rest_framework.test import APIClient

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

# What every answer must be, whatever the input: no 5xx; a status, content type, headers and body
# the schema documents; authentication enforced; undocumented methods refused; a deleted
# resource gone. Not checked: that schema-valid input is accepted (an unknown package or a used
# quota is rightly a 4xx) or that schema-breaking input is refused (an empty filter reads as
# none).
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "ignored_auth",
    "unsupported_method",
    "missing_required_header",
    "use_after_free",
    "ensure_resource_availability",
)


@pytest.mark.long
@pytest.mark.django_db(transaction=True)
def test_api_conforms_to_its_schema(live_server, record):
    """schemathesis's four phases over every operation in /api/schema/ with an operator's key:
    the schema's examples, its coverage cases (boundaries and each constraint broken), fuzzing
    with input that follows the schema and input that breaks it, and stateful sequences along
    the links it infers. A fixed seed, so a run is repeatable (`st run ... --seed 1`)."""
    PackageFactory(article=True)
    key = key_for(TenantFactory(is_operator=True))
    command = [
        str(Path(sys.executable).with_name("st")),
        "run",
        f"{live_server.url}/api/schema/",
        "--phases=examples,coverage,fuzzing,stateful",
        f"--checks={','.join(CHECKS)}",
        "--max-examples=10",
        "--seed=1",
        "--workers=1",
        "--no-color",
        "--continue-on-failure",
        "--header",
        f"Authorization: Bearer {key}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    report = result.stdout.replace(key, "[key]")
    assert result.returncode == 0, report[-20_000:]
    selected = re.search(r"Selected: (\d+)/(\d+)", report)
    tested = re.search(r"Tested: (\d+)", report)
    cases = re.search(r"(\d+) generated, (\d+) passed", report)
    assert selected, report[-5_000:]
    assert tested, report[-5_000:]
    assert cases, report[-5_000:]
    assert tested.group(1) == selected.group(1) == selected.group(2), report[-5_000:]
    assert cases.group(1) == cases.group(2), report[-5_000:]
    record(
        operations=int(tested.group(1)),
        test_cases=int(cases.group(1)),
        phases="examples, coverage, fuzzing (positive and negative), stateful",
        checks=list(CHECKS),
        server_errors=0,
        schema_violations=0,
    )
