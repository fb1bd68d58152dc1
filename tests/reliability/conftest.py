"""Reliability scenarios: each records what it injected and observed in
test-artifacts/reliability.json, the source of the table in docs/reliability.md."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from catalog.tests.factories import PackageFactory
from runtime import orders
from runtime.control import reconcile
from runtime.models import GPUUnit
from runtime.tasks import sweep_operations
from runtime.tests.helpers import remove_namespace_objects
from tenancy.tests.factories import TenantFactory, key_for

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
_figures: dict[str, dict] = {}


@pytest.fixture
def record(request):
    """record(**figures): what this scenario observed, keyed by the test's name."""

    def save(**figures) -> None:
        _figures[request.node.name] = figures

    return save


def pytest_sessionfinish(session, exitstatus):
    if _figures:
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "reliability.json").write_text(json.dumps(_figures, indent=2, default=str))


@pytest.fixture
def h100():
    """One H100 per unit, 10 CPU: the H100 node (8 GPUs, 192 CPU) runs 8 of them."""
    return PackageFactory(
        id="gpu-h100-1x-cpu10",
        spec_name="h100",
        cpu="10",
        memory="16Gi",
        gpu=1,
        count=1,
        device_class_name="nvidia-h100",
    )


@pytest.fixture
def customer(cluster):
    tenant = TenantFactory(quota_cpu="1000", quota_memory="8Ti", quota_claims=500)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(tenant)}")
    client.tenant = tenant
    yield client
    cluster.faults.clear()
    remove_namespace_objects(tenant.namespace)


def order_units(tenant, package_id: str, count: int) -> None:
    """Order `count` units unit-0..unit-<count-1> through the service, as the API would."""
    for index in range(count):
        orders.create_unit(
            tenant=tenant,
            operation_id=f"op-{index}",
            name=f"unit-{index}",
            package_id=package_id,
            image="busybox",
        )


def post_json(url: str, key: str, payload: dict) -> tuple[int, dict | None]:
    """POST over real HTTP; (status, body), status 0 when the connection itself failed."""
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)
    except OSError:
        return 0, None


def wait_until_settled(tenant, phases: set[str], *, timeout: float = 90.0, sweep=False) -> dict:
    """Reconcile (and optionally sweep) as beat would until every unit of the tenant is in
    one of `phases`; return {phase: count}."""
    deadline = time.monotonic() + timeout
    while True:
        if sweep:
            sweep_operations()
        reconcile.reconcile_units()
        units = list(GPUUnit.objects.filter(tenant=tenant).values_list("name", "phase", "reason"))
        if units and all(phase in phases for _name, phase, _reason in units):
            counts: dict[str, int] = {}
            for _name, phase, _reason in units:
                counts[phase] = counts.get(phase, 0) + 1
            return counts
        if time.monotonic() > deadline:
            raise AssertionError(f"units did not settle in {phases}: {units}")
        time.sleep(0.3)
