"""Keys, tenants and limits: every endpoint refuses a missing, revoked or other tenant's key,
keys are never stored or logged in plain text, each key is rate limited."""

from __future__ import annotations

import dataclasses
import logging
import time
from types import SimpleNamespace

import pytest
from rest_framework.test import APIClient

from catalog.tests.factories import PackageFactory
from runtime import manifests, orders
from runtime.tests.test_manifests import CONTRACT
from tenancy import services as tenancy_services
from tenancy.tests.factories import TenantFactory, key_for

pytestmark = pytest.mark.django_db

ENDPOINTS = [
    ("get", "/api/v1/packages"),
    ("get", "/api/v1/packages/gpu-rtx3080-2x-cpu10-mem40g"),
    ("get", "/api/v1/gpu-units"),
    ("post", "/api/v1/gpu-units"),
    ("get", "/api/v1/gpu-units/victim"),
    ("delete", "/api/v1/gpu-units/victim"),
    ("get", "/api/v1/gpu-units/victim/events"),
    ("get", "/api/v1/operations/op-victim"),
    ("get", "/api/v1/operator/inventory"),
]


@pytest.fixture
def victim(db):
    PackageFactory(article=True)
    tenant = TenantFactory(is_operator=False)
    orders.create_unit(
        tenant=tenant,
        operation_id="op-victim",
        name="victim",
        package_id="gpu-rtx3080-2x-cpu10-mem40g",
        image="busybox",
    )
    return tenant


def call(client: APIClient, method: str, path: str):
    if method == "post":
        return client.post(
            path,
            {
                "operationID": "x",
                "name": "x",
                "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
                "image": "busybox",
            },
            format="json",
        )
    return getattr(client, method)(path)


BAD_HEADERS = {
    "missing": None,
    "empty": "Bearer",
    "other-scheme": "Basic abc",
    "malformed": "Token abc",
    "not-a-key": "Bearer nope",
    "unknown": "Bearer gcp_000000000000_" + "x" * 43,
}


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
@pytest.mark.parametrize("credential", [*BAD_HEADERS, "revoked"])
def test_every_endpoint_refuses_bad_keys(victim, method, path, credential):
    client = APIClient()
    if credential == "revoked":
        api_key, key = tenancy_services.create_api_key(tenant=victim)
        tenancy_services.revoke_api_key(api_key=api_key)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    elif BAD_HEADERS[credential]:
        client.credentials(HTTP_AUTHORIZATION=BAD_HEADERS[credential])
    response = call(client, method, path)
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "unauthenticated"
    if credential == "revoked":
        assert "revoked" in error["message"]


def test_only_the_keys_hash_is_stored(victim):
    api_key, key = tenancy_services.create_api_key(tenant=victim)
    stored = " ".join(str(v) for v in type(api_key).objects.values_list().get(pk=api_key.pk))
    assert key not in stored
    assert key.split("_", 2)[2] not in stored
    assert tenancy_services.hash_key(key) in stored


@pytest.mark.parametrize(("method", "path"), [e for e in ENDPOINTS if "victim" in e[1]])
def test_another_tenants_unit_does_not_exist_for_you(victim, method, path):
    intruder = APIClient()
    intruder.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(TenantFactory())}")
    response = call(intruder, method, path)
    assert response.status_code == 404
    assert victim.units.get().phase == "Accepted"  # untouched


def test_inventory_is_for_operators_only(victim):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(victim)}")
    assert client.get("/api/v1/operator/inventory").status_code == 403


def test_keys_are_never_logged(victim, caplog):
    api_key, key = tenancy_services.create_api_key(tenant=victim)
    caplog.set_level(logging.DEBUG)
    good = APIClient()
    good.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    good.get("/api/v1/gpu-units")
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION=f"Bearer {key}tampered")
    bad.get("/api/v1/gpu-units")
    secret = key.split("_", 2)[2]
    assert caplog.records, "nothing was logged: the check would be empty"
    assert secret not in caplog.text
    assert api_key.key_hash not in caplog.text


def test_each_key_is_rate_limited_on_its_own(victim, settings, monkeypatch):
    from django.core.cache import cache

    from controlplane import ratelimit

    cache.clear()
    settings.API_THROTTLE_RATE = "5/day"  # one window for the whole test
    # The limiter's clock held at noon (UTC) of today: its windows are whole UTC days, so a
    # test run just before midnight would otherwise count its last requests in a new window.
    noon = time.time() // 86400 * 86400 + 43200
    monkeypatch.setattr(ratelimit, "time", SimpleNamespace(time=lambda: noon))
    first, second = APIClient(), APIClient()
    first.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(victim)}")
    second.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(victim)}")
    statuses = [first.get("/api/v1/gpu-units").status_code for _ in range(7)]
    assert statuses == [200] * 5 + [429] * 2
    limited = first.get("/api/v1/gpu-units")
    assert limited.json()["error"]["code"] == "throttled"
    assert int(limited["Retry-After"]) > 0
    assert second.get("/api/v1/gpu-units").status_code == 200  # other keys are unaffected


def test_unit_pods_meet_pod_security_restricted():
    """The checks of the Kubernetes Pod Security 'restricted' profile, on the built pod."""
    contract = dataclasses.replace(
        CONTRACT,
        ports=[{"name": "http", "port": 8080, "protocol": "TCP"}],
        storage_mounts=[{"name": "data", "mountPath": "/data", "readOnly": False}],
        memory_bytes=40 * 2**30,
    )
    spec = manifests.build_pod(contract, owner_uid="uid")["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key)
    # "restricted" allows only these volume types (no hostPath): /dev/shm and storage mounts.
    allowed = {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
    for volume in spec.get("volumes", []):
        assert set(volume) - {"name"} <= allowed, volume
    for container in spec["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert not context.get("privileged")
        assert context.get("runAsUser", 1) != 0
        assert all("hostPort" not in port for port in container.get("ports", []))


def test_rate_limiter_fails_open_when_its_redis_is_gone(victim, monkeypatch):
    import redis

    from controlplane import ratelimit
    from devstack.services import free_port

    dead = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2)
    monkeypatch.setattr(ratelimit, "_client", dead)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(victim)}")
    assert client.get("/api/v1/gpu-units").status_code == 200
