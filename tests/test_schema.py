"""The OpenAPI schema generates and documents the envelope; Swagger UI is served locally."""

import re

import pytest
import yaml
from openapi_spec_validator import validate

pytestmark = pytest.mark.django_db


def test_schema_lists_the_api_with_envelope_shapes(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert {"/api/v1/health", "/api/v1/packages", "/api/v1/packages/{id}"} <= set(schema["paths"])
    package_list = schema["components"]["schemas"]["PackageList"]
    assert package_list["properties"]["data"]["type"] == "array"
    grace = schema["components"]["schemas"]["Package"]["properties"][
        "terminationGracePeriodSeconds"
    ]
    assert (grace["type"], grace["minimum"], grace["maximum"]) == ("integer", 0, 3600)
    assert grace["readOnly"] is True
    assert "SIGTERM" in grace["description"]
    assert "Error" in schema["components"]["schemas"]


def test_the_schema_is_a_valid_openapi_document(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    assert schema["openapi"].startswith("3.")
    validate(schema)  # raises, naming the path, on anything a generator would trip on


def test_the_operator_inventorys_device_rows_document_every_field(client):
    components = yaml.safe_load(client.get("/api/schema/").content)["components"]["schemas"]
    where = {"driver", "pool", "device", "nodeName"}
    shared = components["SharedDevice"]["properties"]
    assert set(shared) == where | {"shares", "capacity", "consumed", "remaining"}
    for name in ("capacity", "consumed", "remaining"):  # a map of quantities each
        assert shared[name]["additionalProperties"] == {"type": "string"}
    tainted = components["TaintedDevice"]["properties"]
    assert set(tainted) == where | {"allocated", "claim", "taints"}


def test_swagger_ui_assets_come_from_this_server_not_a_cdn(client):
    page = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in page
    # Every asset the page loads is a path on this server; the page also carries a random
    # CSRF token, so a substring search for a CDN's name could match by chance.
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert len(assets) >= 3
    assert all(url.startswith("/static/drf_spectacular_sidecar/") for url in assets), assets
    asset = client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert asset.status_code == 200


def _example(schema: dict, components: dict):
    """The request body Swagger UI prefills from a schema: a property's example, else
    "string" for strings, an integer's minimum, an enum's first value, one item per array,
    every property of an object."""
    if "example" in schema:
        return schema["example"]
    if "$ref" in schema:
        return _example(components[schema["$ref"].rsplit("/", 1)[1]], components)
    if "allOf" in schema:
        return _example(schema["allOf"][0], components)
    kind = schema.get("type")
    if kind == "object":
        return {
            name: _example(sub, components) for name, sub in schema.get("properties", {}).items()
        }
    if kind == "array":
        return [_example(schema["items"], components)]
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "integer":
        return schema.get("minimum", 0)
    return {"string": "string", "boolean": True}.get(kind, "string")


def test_the_create_schema_states_what_the_server_enforces(client, auth_client):
    from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory

    # Sold as interruptible too: Swagger's example orders `"interruptible": true`.
    PackageFactory(article=True, interruptible=True)
    components = yaml.safe_load(client.get("/api/schema/").content)["components"]["schemas"]
    create = components["CreateUnitRequest"]
    assert create["properties"]["name"]["maxLength"] == 54
    # Swagger's own example (typed template included) is accepted once the IDs are real.
    body = _example(create, components)
    assert isinstance(body["template"], dict)
    body.update(operationID="schema-1", name="n" * 54, packageID=ARTICLE_PACKAGE_ID)
    body["image"] = "python:3.12"
    # Like packageID, a mount names something that must exist (the tenant's storage).
    assert body.pop("storageMounts")[0].keys() == {"name", "mountPath", "readOnly"}
    assert body.pop("ssh") == {"enabled": True, "keys": ["string"]}  # names a registered key
    body["region"] = "default"  # a region with a cluster (GET /regions)
    assert body.pop("reservation") == "string"  # names an active reservation of the tenant
    # An env entry has a value or a secretRef (a tenant secret's key), never both.
    for entry in body["template"]["env"]:
        assert entry.pop("secretRef").keys() == {"name", "key"}
    response = auth_client.post("/api/v1/gpu-units", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["data"]["template"] == body["template"]
    body.update(operationID="schema-2", name="n" * 55)
    assert auth_client.post("/api/v1/gpu-units", body, format="json").status_code == 400


VERBS = (
    r"(list|create|get|update|delete|stop|start|restart|events|logs|download|rotate_secret|test)"
)


def test_every_operation_is_named_resource_then_verb_and_tagged_by_resource(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    operations = [
        (method, path, operation)
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
    ]
    ids = [operation["operationId"] for _, _, operation in operations]
    assert len(ids) == len(set(ids))
    assert [i for i in ids if not re.fullmatch(rf"[a-z]+(_[a-z]+)*_{VERBS}", i)] == []
    tags = {t["name"] for t in schema["tags"]}
    assert all(len(op["tags"]) == 1 and op["tags"][0] in tags for _, _, op in operations)
    named = {(m, p): op["operationId"] for m, p, op in operations}
    assert named[("post", "/api/v1/gpu-units")] == "units_create"
    assert named[("post", "/api/v1/gpu-units/{name}/stop")] == "units_stop"
    assert named[("patch", "/api/v1/gpu-units/{name}")] == "units_update"


def test_each_operation_documents_only_the_bodies_it_takes_and_its_errors(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            body = set(operation.get("requestBody", {}).get("content", {}))
            if method == "patch":
                assert body == {"application/json", "application/merge-patch+json"}, path
            elif body:
                assert body == {"application/json"}, (method, path)
            for status, response in operation["responses"].items():
                if status.startswith("4"):
                    content = response["content"]["application/json"]["schema"]
                    assert content == {"$ref": "#/components/schemas/Error"}, (method, path)
    assert schema["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"


def test_a_merge_patch_is_taken_by_patch_alone(auth_client):
    from catalog.tests.factories import PackageFactory

    package = PackageFactory(article=True)
    refused = auth_client.generic(
        "POST",
        "/api/v1/gpu-units",
        b'{"operationID": "mp", "name": "mp", "packageID": "%s", "image": "x"}'
        % package.id.encode(),
        content_type="application/merge-patch+json",
    )
    assert refused.status_code == 415
    assert refused.json()["error"]["code"] == "unsupported_media_type"
    assert (
        auth_client.post(
            "/api/v1/gpu-units",
            {"operationID": "mp", "name": "mp", "packageID": package.id, "image": "x"},
            format="json",
        ).status_code
        == 201
    )
    # Read as a merge patch: its fields are checked (an unknown one named), not refused as a type.
    patched = auth_client.generic(
        "PATCH",
        "/api/v1/gpu-units/mp",
        b'{"operationID": "mp-2", "imag": "y"}',
        content_type="application/merge-patch+json",
        HTTP_IF_MATCH='"1-x"',
    )
    assert patched.status_code == 400, patched.json()
    assert "imag" in patched.json()["error"]["details"]["fields"]
