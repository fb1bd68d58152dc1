"""Tenant, key and unit factories for tests: each tenant gets its own namespace."""

from __future__ import annotations

import itertools

from catalog.tests.factories import PackageFactory
from runtime import manifests, services
from runtime.models import GPUUnit, Tenant

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


def UnitFactory(tenant: Tenant, name: str, **overrides) -> GPUUnit:
    """An unsaved unit as an order of PackageFactory's package (RTX 3080 x2, 10 CPU, 40Gi)
    records it. Saving it directly skips the order: call services.recount_usage() to charge
    the tenant for it."""
    package = PackageFactory(save=False)
    claim_name = manifests.claim_name_for(name)
    fields = {
        "tenant": tenant,
        "name": name,
        "namespace": tenant.namespace,
        "operation_id": f"op-{name}",
        "package_id": package.id,
        "spec_name": package.spec_name,
        "cpu": package.cpu,
        "memory": package.memory,
        "cpu_millicores": package.cpu_millicores,
        "memory_bytes": package.memory_bytes,
        "gpu": package.gpu,
        "device_class_name": package.device_class_name,
        "claim_name": claim_name,
        "claim_request_name": package.claim_request_name,
        "count": package.count,
        "image": "python:3.12",
        "dra": {"claimName": claim_name, "allocated": False, "devices": []},
    }
    fields.update(overrides)
    return GPUUnit(**fields)
