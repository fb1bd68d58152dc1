"""How the API server's refusals are classified: what retrying can mend (temporary) and what it
cannot (permanent, the unit fails with the reason), checked against what a real API server
says."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from controlplane import kube
from controlplane.kube.errors import PermanentError, TemporaryError, classify


def refusal(status: int, message: str) -> ApiException:
    failure = ApiException(status=status, reason="Forbidden")
    failure.body = json.dumps({"kind": "Status", "message": message, "reason": "Forbidden"})
    return failure


@pytest.mark.parametrize(
    ("message", "kind", "reason"),
    [
        (
            'pods "unit-a" is forbidden: error looking up service account t-ns/default: '
            'serviceaccount "default" not found',
            TemporaryError,
            "ServiceAccountPending",
        ),
        (
            'pods "unit-a" is forbidden: exceeded quota: gpu-units, requested: requests.cpu=10',
            PermanentError,
            "QuotaExceeded",
        ),
        ('pods "unit-a" is forbidden: User "x" cannot create', PermanentError, "Forbidden"),
    ],
)
def test_a_403_is_temporary_only_while_the_namespace_s_service_account_is_made(
    message, kind, reason
):
    error = classify(refusal(403, message))
    assert isinstance(error, kind)
    assert error.reason == reason


def test_the_api_server_says_so_when_a_pod_s_service_account_is_missing(cluster):
    """The admission plugin's words, as the real API server gives them: a pod naming a
    ServiceAccount that is not there is refused exactly as one in a namespace whose "default"
    the controller-manager has not made yet."""
    namespace = f"sa-{uuid.uuid4().hex[:8]}"
    kube.create(kube.NAMESPACE, None, {"metadata": {"name": namespace}})
    try:
        with pytest.raises(TemporaryError) as raised:
            kube.create(
                kube.POD,
                namespace,
                {
                    "metadata": {"name": "waits"},
                    "spec": {
                        "serviceAccountName": "not-made-yet",
                        "containers": [{"name": "main", "image": "busybox"}],
                    },
                },
            )
        assert raised.value.reason == "ServiceAccountPending"
        assert raised.value.status == 403
    finally:
        kube.delete(kube.NAMESPACE, None, namespace)
