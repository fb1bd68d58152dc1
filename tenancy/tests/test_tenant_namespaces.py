"""A tenant's namespace is never one of Kubernetes' own or the control plane's."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from tenancy.services import create_tenant

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "namespace", ["kube-system", "kube-public", "kube-node-lease", "default", "gpu-control-plane"]
)
def test_a_reserved_namespace_is_refused(namespace):
    """Issue 41, item 6: a tenant's namespace could be set to kube-system."""
    with pytest.raises(ValidationError) as refused:
        create_tenant(slug="sneaky", namespace=namespace)
    assert "reserved" in str(refused.value.message_dict["namespace"])


def test_an_ordinary_namespace_is_taken():
    assert create_tenant(slug="fine", namespace="team-fine").namespace == "team-fine"
