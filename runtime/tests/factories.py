"""Unit factory for tests."""

from __future__ import annotations

from typing import Any

import factory
from django.conf import settings
from factory.django import DjangoModelFactory

from catalog.tests.factories import PackageFactory
from runtime.models import GPUUnit
from tenancy.tests.factories import TenantFactory


class UnitFactory(DjangoModelFactory):
    """A unit as an order of `package` (default: the article's RTX 3080 x2, 10 CPU, 40Gi)
    records it, contract snapshot included. Saved directly (`create()`), it skips the order:
    call lifecycle.recount_usage() to charge the tenant for it, and add its operation and
    timeline if a test needs them. `build()` leaves it unsaved."""

    class Meta:
        model = GPUUnit

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"unit-{n}")
    namespace = factory.LazyAttribute(lambda unit: unit.tenant.namespace)
    # Placed in the process's own cluster, as an order with one cluster registered is.
    cluster = factory.LazyFunction(lambda: settings.CLUSTER_NAME)
    region = factory.LazyFunction(lambda: settings.CLUSTER_REGION)
    operation_id = factory.LazyAttribute(lambda unit: f"op-{unit.name}")
    image = "python:3.12"
    package = None

    @classmethod
    def _adjust_kwargs(cls, **kwargs: Any) -> dict[str, Any]:
        package = kwargs.pop("package") or PackageFactory.build(article=True)
        return {**GPUUnit.contract_fields(package, name=kwargs["name"]), **kwargs}
