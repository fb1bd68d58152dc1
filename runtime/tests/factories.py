"""Tenant, key and unit factories for tests: each tenant gets its own namespace."""

from __future__ import annotations

import itertools

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
    claim_name = manifests.claim_name_for(name)
    fields = {
        "tenant": tenant,
        "name": name,
        "namespace": tenant.namespace,
        "operation_id": f"op-{name}",
        "package_id": "gpu-rtx3080-2x-cpu10-mem40g",
        "spec_name": "gpu.rtx3080.2x.10c.40g",
        "cpu": "10",
        "memory": "40Gi",
        "cpu_millicores": 10_000,
        "memory_bytes": 40 * 2**30,
        "gpu": 2,
        "device_class_name": "nvidia-rtx-3080",
        "claim_name": claim_name,
        "claim_request_name": "gpu",
        "count": 2,
        "image": "python:3.12",
        "dra": {"claimName": claim_name, "allocated": False, "devices": []},
    }
    fields.update(overrides)
    return GPUUnit(**fields)
