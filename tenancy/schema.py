"""Tells drf-spectacular how API keys are sent, so the schema documents bearer auth."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "tenancy.auth.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "Tenant API key: `Authorization: Bearer gcp_...`",
        }
