"""The API key lookup every request makes: one hand-written statement that reads what the ORM
reads."""

from __future__ import annotations

import pytest

from tenancy import keys
from tenancy import services as tenancy_services
from tenancy.models import ApiKey, Tenant
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def test_the_key_lookup_returns_the_key_and_tenant_the_orm_reads():
    tenant = TenantFactory(display_name="Ünïcode")
    api_key, _secret = tenancy_services.create_api_key(tenant=tenant, name="ci")
    found = keys.find_api_key(api_key.prefix)
    expected = ApiKey.objects.select_related("tenant").get(pk=api_key.pk)
    for field in ApiKey._meta.concrete_fields:
        assert getattr(found, field.attname) == getattr(expected, field.attname), field.name
    for field in Tenant._meta.concrete_fields:
        assert getattr(found.tenant, field.attname) == getattr(tenant, field.attname), field.name
    assert keys.find_api_key("nothing") is None
