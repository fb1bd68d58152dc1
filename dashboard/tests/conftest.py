"""Fixtures for dashboard view tests: users linked to tenants, units in given phases."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from catalog.tests.factories import PackageFactory
from runtime import lifecycle
from runtime.models import GPUUnit, UnitEvent
from runtime.tests.factories import UnitFactory
from tenancy.models import Tenant
from tenancy.staff import STAFF_EDITOR
from tenancy.tests.factories import TenantFactory

_users = itertools.count(1)
PASSWORD = "a-long-test-password"


def make_user(
    *tenants: Tenant, staff: bool = False, groups: tuple[str, ...] = (STAFF_EDITOR,)
) -> User:
    """A user linked to `tenants`; with `staff`, a staff account in `groups` (by default the one
    that sees and acts for every tenant)."""
    user = User.objects.create_user(f"user{next(_users)}", password=PASSWORD, is_staff=staff)
    for tenant in tenants:
        tenant.users.add(user)
    if staff:
        user.groups.set([Group.objects.get(name=name) for name in groups])
    return user


def client_for(user: User, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def make_unit(tenant: Tenant, name: str, *, phase: str = "Running", **fields) -> GPUUnit:
    """A unit row as the runtime leaves it, without going through the cluster."""
    unit = UnitFactory(tenant=tenant, name=name, phase=phase, **fields)
    UnitEvent.objects.create(unit=unit, reason="Accepted", message="Ordered.")
    lifecycle.recount_usage()  # charge the tenant for it, as an order would have
    return unit


@pytest.fixture(autouse=True)
def _no_address_limit(settings):
    """Every test client is 127.0.0.1, counted together across the run: these tests look at
    the pages, not at DASHBOARD_RATE_PER_ADDRESS (test_rate_limit.py does)."""
    settings.DASHBOARD_RATE_PER_ADDRESS = "1000000/min"


@pytest.fixture
def package(db):
    return PackageFactory(article=True)


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
