"""Tenant and API key factories: each tenant gets its own namespace."""

from __future__ import annotations

from typing import Any

import factory
from factory.django import DjangoModelFactory

from tenancy import services
from tenancy.models import Tenant


class TenantFactory(DjangoModelFactory):
    """A tenant with the article's quota; `create()` goes through services.create_tenant (so
    through full_clean), `build()` leaves it unsaved."""

    class Meta:
        model = Tenant

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    namespace = factory.LazyAttribute(lambda tenant: f"{tenant.slug}-ns")
    display_name = ""
    quota_cpu = "160"
    quota_memory = "256Gi"
    quota_claims = 64
    is_operator = False

    @classmethod
    def _create(cls, model_class: type[Tenant], *args: Any, **kwargs: Any) -> Tenant:
        return services.create_tenant(**kwargs)


def key_for(tenant: Tenant) -> str:
    """A new API key of `tenant` (its secret)."""
    return services.create_api_key(tenant=tenant, name="test")[1]
