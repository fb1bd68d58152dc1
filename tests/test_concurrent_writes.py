"""Concurrent writes through the real server (gunicorn, 2 processes x 8 threads, on the test
database): sixteen creates of one name answer one 201 and fifteen 409s, never a 5xx, for
units, storages and SSH keys; forty parallel SSH keys stop at the tenant's cap (issue 41,
items 7 and 8)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from catalog.tests.factories import PackageFactory
from tenancy.models import SSHKey
from tenancy.tests.factories import key_for
from tests.reliability.conftest import post_json
from tests.servers import gunicorn

# The orders and storages go no further than the database: no worker takes their tasks (they
# are discarded after the test), so nothing of them reaches the shared development cluster.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("session_worker_paused"),
]

PARALLEL = 16


@pytest.fixture
def server(tenant) -> Iterator[tuple[str, str]]:
    """gunicorn with several processes and threads; yields its base URL and a tenant key."""
    key = key_for(tenant)
    with gunicorn(workers=2, threads=8, SSH_KEYS_PER_TENANT="8") as base:
        yield base, key


def _all_at_once(url: str, key: str, bodies: list[dict]) -> list[int]:
    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        results = list(pool.map(lambda body: post_json(url, key, body), bodies))
    return sorted(status for status, _ in results)


def _public_key(comment: str) -> str:
    raw = ed25519.Ed25519PrivateKey.generate().public_key()
    text = raw.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{text.decode()} {comment}"


def test_concurrent_creates_of_one_name_are_one_201_and_409s(server):
    base, key = server
    package = PackageFactory()
    units = [
        {"operationID": f"op-{i}", "name": "same", "packageID": package.id, "image": "busybox"}
        for i in range(PARALLEL)
    ]
    assert _all_at_once(f"{base}/api/v1/gpu-units", key, units) == [201] + [409] * (PARALLEL - 1)
    storages = [{"name": "vol", "size": "1Gi"}] * PARALLEL
    assert _all_at_once(f"{base}/api/v1/gpu-storages", key, storages) == [201] + [409] * (
        PARALLEL - 1
    )
    keys = [{"name": "k1", "publicKey": _public_key("a@b")}] * PARALLEL
    assert _all_at_once(f"{base}/api/v1/ssh-keys", key, keys) == [201] + [409] * (PARALLEL - 1)


def test_parallel_ssh_keys_stop_at_the_cap(server, tenant):
    """Issue 41, item 8: the cap was counted outside the tenant lock."""
    base, key = server
    bodies = [{"name": f"k{i}", "publicKey": _public_key(f"k{i}@b")} for i in range(40)]
    statuses = _all_at_once(f"{base}/api/v1/ssh-keys", key, bodies)
    assert statuses == [201] * 8 + [409] * 32
    assert SSHKey.objects.filter(tenant=tenant).count() == 8
