"""Fixtures for dashboard view tests: users linked to tenants, units in given phases."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth.models import User
from django.test import Client

from catalog.tests.factories import PackageFactory
from runtime import manifests, services
from runtime.models import GPUUnit, Tenant, UnitEvent
from runtime.tests.factories import TenantFactory

_users = itertools.count(1)
PASSWORD = "a-long-test-password"


def make_user(*tenants: Tenant, staff: bool = False) -> User:
    user = User.objects.create_user(f"user{next(_users)}", password=PASSWORD, is_staff=staff)
    for tenant in tenants:
        tenant.users.add(user)
    return user


def client_for(user: User, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def make_unit(tenant: Tenant, name: str, *, phase: str = "Running", **fields) -> GPUUnit:
    """A unit row as the runtime leaves it, without going through the cluster."""
    values = {
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
        "claim_name": manifests.claim_name_for(name),
        "claim_request_name": "gpu",
        "count": 2,
        "image": "python:3.12",
        "phase": phase,
        "dra": {"claimName": manifests.claim_name_for(name), "allocated": False, "devices": []},
        **fields,
    }
    unit = GPUUnit.objects.create(**values)
    UnitEvent.objects.create(unit=unit, reason="Accepted", message="Ordered.")
    services.recount_usage()  # charge the tenant for it, as an order would have
    return unit


@pytest.fixture
def package(db):
    return PackageFactory()


@pytest.fixture
def other_tenant(db) -> Tenant:
    return TenantFactory()


@pytest.fixture
def member(tenant) -> User:
    return make_user(tenant)


@pytest.fixture
def member_client(member) -> Client:
    return client_for(member)


@pytest.fixture
def staff_client(db) -> Client:
    return client_for(make_user(staff=True))
