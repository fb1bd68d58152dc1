"""Fixtures of the billing tests that run on the stack."""

from __future__ import annotations

import pytest

from billing.tests.helpers import assert_usage_audited
from runtime.tests.helpers import remove_namespace_objects


@pytest.fixture
def audited_stack(tenant, cluster):
    """After the test: what its units held (their timelines) is what the ledger bills them,
    then the objects it left in its tenant's namespace are removed."""
    yield
    try:
        assert_usage_audited()
    finally:
        remove_namespace_objects(tenant.namespace)
