"""The OpenAPI schema generates and documents the envelope; Swagger UI is served locally."""

import pytest
import yaml

pytestmark = pytest.mark.django_db


def test_schema_lists_the_api_with_envelope_shapes(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert {"/api/v1/health", "/api/v1/packages", "/api/v1/packages/{id}"} <= set(schema["paths"])
    package_list = schema["components"]["schemas"]["PackageList"]
    assert package_list["properties"]["data"]["type"] == "array"
    assert "Error" in schema["components"]["schemas"]


def test_swagger_ui_assets_come_from_this_server_not_a_cdn(client):
    page = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in page
    assert "cdn" not in page.lower()
    assert "/static/drf_spectacular_sidecar/" in page
    asset = client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert asset.status_code == 200
