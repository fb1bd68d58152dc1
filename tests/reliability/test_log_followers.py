"""32 followed logs of one tenant against gunicorn as the product runs it (gunicorn.conf.py,
2 workers x 4 threads): those beyond the caps are 429 `throttled` with Retry-After, those let
in stream while another tenant lists its units, and that tenant's GET /gpu-units latency idle
and loaded is recorded (docs/reliability.md). The caps are the defaults (or the environment's:
the test process reads the same LOGS_FOLLOWERS_* and WEB_THREADS as the server's)."""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from runtime import orders
from runtime.tests.helpers import remove_namespace_objects
from tenancy.tests.factories import TenantFactory, key_for
from tests.reliability.conftest import order_units, wait_until_settled
from tests.servers import gunicorn

pytestmark = [
    pytest.mark.long,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker"),
]

ROOT = Path(__file__).resolve().parents[2]
FOLLOWERS = 32
SAMPLES = 1000
LISTED_UNITS = 6
WORKERS, THREADS = 2, 4  # the Dockerfile's, k8s/control-plane/web.yaml's and make run's


@pytest.fixture
def web(cluster) -> Iterator[str]:
    """gunicorn on a free port over the test database and the session's cluster."""
    # The limiter runs but never refuses the measuring client's hundreds of requests.
    with gunicorn(workers=WORKERS, threads=THREADS, API_THROTTLE_RATE="100000000/min") as base:
        yield base


@pytest.fixture
def tenants(h100):
    """The follower (one Running unit, `talker`) and the lister (units to list)."""
    follower = TenantFactory(quota_cpu="1000", quota_memory="8Ti", quota_claims=500)
    lister = TenantFactory(quota_cpu="1000", quota_memory="8Ti", quota_claims=500)
    orders.create_unit(
        tenant=follower, operation_id="talk", name="talker", package_id=h100.id, image="busybox"
    )
    order_units(lister, h100.id, LISTED_UNITS)
    wait_until_settled(follower, {"Running"})
    wait_until_settled(lister, {"Running", "Pending"})
    yield follower, lister
    remove_namespace_objects(follower.namespace)
    remove_namespace_objects(lister.namespace)


def latencies(url: str, key: str) -> dict[str, float | int]:
    """SAMPLES sequential requests from a process of their own (tests/reliability/latency.py)."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.reliability.latency", url, key, str(SAMPLES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    measured = json.loads(result.stdout)
    ordered = sorted(measured["seconds"])
    return {
        "p50_ms": round(ordered[math.ceil(0.50 * len(ordered)) - 1] * 1000, 1),
        "p99_ms": round(ordered[math.ceil(0.99 * len(ordered)) - 1] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
        "failed": sum(1 for status in measured["statuses"] if status != 200),
    }


class Follower(threading.Thread):
    """One client following the log: its answer, then reading the stream until it ends or
    `hang_up` shuts its socket."""

    def __init__(self, base: str, key: str) -> None:
        super().__init__(daemon=True)
        address = urlsplit(base)
        self.connection = http.client.HTTPConnection(address.hostname, address.port, timeout=120)
        self.key = key
        self.answered = threading.Event()
        self.status = 0
        self.error: dict = {}
        self.retry_after = ""
        self.streamed = 0

    def run(self) -> None:
        self.connection.request(
            "GET",
            "/api/v1/gpu-units/talker/logs?follow=true",
            headers={"Authorization": f"Bearer {self.key}"},
        )
        response = self.connection.getresponse()
        self.status = response.status
        if response.status != 200:
            self.error = json.loads(response.read())["error"]
            self.retry_after = response.getheader("Retry-After", "")
            self.answered.set()
            return
        self.answered.set()
        try:
            while chunk := response.read1(65536):
                self.streamed += len(chunk)
        except (OSError, http.client.HTTPException):
            pass  # hung up mid-chunk

    def hang_up(self) -> None:
        with contextlib.suppress(OSError):  # a refused one's socket may be gone already
            if self.connection.sock is not None:
                self.connection.sock.shutdown(socket.SHUT_RDWR)
        self.join(timeout=30)
        self.connection.close()


def followers_open(base: str, key: str) -> int:
    address = urlsplit(base)
    client = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    client.request("GET", "/api/v1/quota", headers={"Authorization": f"Bearer {key}"})
    limits = json.loads(client.getresponse().read())["data"]["limits"]
    client.close()
    return int(limits["logFollowers"]["used"])


def test_thirty_two_followers_of_one_tenant_do_not_slow_another_s_list(
    web, tenants, cluster, settings, record
):
    follower, lister = tenants
    follower_key, lister_key = key_for(follower), key_for(lister)
    list_url = f"{web}/api/v1/gpu-units"
    latencies(list_url, lister_key)  # warm both workers (connections, caches)
    idle = latencies(list_url, lister_key)

    # The unit prints 100 lines of 100 bytes a second while followed: the followers let in
    # stream all the time.
    stop_talking = threading.Event()

    def talk() -> None:
        line = 0
        while not stop_talking.wait(0.01):
            line += 1
            cluster.append_log(follower.namespace, "unit-talker", [f"step {line:06d} " + "x" * 88])

    talker = threading.Thread(target=talk, daemon=True)
    talker.start()
    followers = [Follower(web, follower_key) for _ in range(FOLLOWERS)]
    try:
        try:
            for each in followers:
                each.start()
            deadline = time.monotonic() + 60
            for each in followers:
                assert each.answered.wait(max(0.0, deadline - time.monotonic())), "no answer"
            admitted = [each for each in followers if each.status == 200]
            refused = [each for each in followers if each.status != 200]
            loaded = latencies(list_url, lister_key)
            # Still streaming at the end of the loaded measurement: the load lasted throughout.
            still_open = followers_open(web, follower_key)
            streamed_while_measured = sum(each.streamed for each in admitted)
        finally:
            for each in followers:
                each.hang_up()
        # The unit still prints: the server notices each hang-up at its next write.
        deadline = time.monotonic() + 30
        while (back := followers_open(web, follower_key)) > 0:
            assert time.monotonic() < deadline, f"{back} follower slots not given back"
            time.sleep(0.1)
    finally:
        stop_talking.set()
        talker.join()
    idle_after = latencies(list_url, lister_key)

    refusals = {
        scope: sum(1 for each in refused if each.error.get("details", {}).get("limit") == scope)
        for scope in ("tenant", "total", "process")
    }
    record(
        web=f"gunicorn {WORKERS} workers x {THREADS} threads (gunicorn.conf.py)",
        caps={
            "per_tenant": settings.LOGS_FOLLOWERS_PER_TENANT,
            "total": settings.LOGS_FOLLOWERS_TOTAL,
            "per_process": settings.LOGS_FOLLOWERS_PER_PROCESS,
        },
        followers=FOLLOWERS,
        admitted=len(admitted),
        throttled=len(refused),
        throttled_by=refusals,
        retry_after=sorted({int(each.retry_after) for each in refused}),
        still_open_after_loaded=still_open,
        bytes_streamed=streamed_while_measured,
        samples=SAMPLES,
        listed_units=LISTED_UNITS,
        idle=idle,
        loaded=loaded,
        idle_after=idle_after,
        p99_loaded_over_idle=round(loaded["p99_ms"] / idle["p99_ms"], 2),
    )
    assert 1 <= len(admitted) <= settings.LOGS_FOLLOWERS_PER_TENANT
    assert len(admitted) <= WORKERS * settings.LOGS_FOLLOWERS_PER_PROCESS
    assert all(each.status == 429 and each.error["code"] == "throttled" for each in refused)
    assert all(int(each.retry_after) >= 1 for each in refused)
    assert sum(refusals.values()) == len(refused)
    assert still_open == len(admitted)
    assert streamed_while_measured > 0
    # No request of the other tenant waited for a follower to end (10 s without an answer).
    assert idle["failed"] == loaded["failed"] == idle_after["failed"] == 0
