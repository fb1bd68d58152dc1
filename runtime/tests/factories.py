"""Tenant and key factories for tests: each tenant gets its own namespace."""

from __future__ import annotations

import itertools

from runtime import services
from runtime.models import Tenant

_sequence = itertools.count(1)


def TenantFactory(**overrides) -> Tenant:
    number = next(_sequence)
    fields = {
        "slug": f"tenant-{number}",
        "namespace": f"tenant-{number}-ns",
        "quota_cpu": "160",
        "quota_memory": "256Gi",
        "quota_claims": 64,
    }
    fields.update(overrides)
    return services.create_tenant(**fields)


def key_for(tenant: Tenant) -> str:
    return services.create_api_key(tenant=tenant, name="test")[1]
