"""GET /api/v1/health is limited per client address (HEALTH_RATE_PER_ADDRESS), since each report
asks the cluster; /readyz, which Kubernetes probes for readiness, never is."""

from __future__ import annotations

import ipaddress
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
import yaml
from rest_framework.test import APIClient

from controlplane import health, ratelimit
from devstack.services import free_port

ROOT = Path(__file__).resolve().parents[2]
HEALTH = "/api/v1/health"


def new_address() -> str:
    """An address no other test, nor an earlier run in the same window, has counted against."""
    return str(ipaddress.IPv4Address("10.0.0.0") + secrets.randbelow(2**24))


def get_health(address: str, **headers: str):
    return APIClient().get(HEALTH, REMOTE_ADDR=address, **headers)


@pytest.fixture
def reports(monkeypatch) -> list[int]:
    """Health reports made: each would ask the cluster, so the limit stands in front of them."""
    made: list[int] = []

    def report() -> tuple[bool, dict]:
        made.append(1)
        return True, {"status": "ok", "checks": {}}

    monkeypatch.setattr(health, "report", report)
    return made


@pytest.fixture
def limited(settings, monkeypatch):
    settings.HEALTH_RATE_PER_ADDRESS = "2/day"  # one window for the whole test
    # The limiter's clock held at noon (UTC) of today: its windows are whole UTC days, so a
    # test run just before midnight would otherwise count its last requests in a new window.
    noon = time.time() // 86400 * 86400 + 43200
    monkeypatch.setattr(ratelimit, "time", SimpleNamespace(time=lambda: noon))


def test_health_is_429_throttled_in_the_envelope_when_one_address_asks_too_often(limited, reports):
    address = new_address()
    assert [get_health(address).status_code for _ in range(2)] == [200, 200]

    refused = get_health(address)

    assert refused.status_code == 429
    assert refused["Content-Type"] == "application/json"
    assert refused.json()["error"]["code"] == "throttled"
    assert 0 < int(refused["Retry-After"]) <= 86400
    assert len(reports) == 2  # the refused request never reached the cluster


def test_health_answers_another_address_when_one_is_over_the_limit(limited, reports):
    address = new_address()
    for _ in range(3):
        get_health(address)
    assert get_health(address).status_code == 429
    assert get_health(new_address()).status_code == 200


def test_an_ipv6_client_is_counted_by_its_64(limited, reports):
    network = ipaddress.IPv6Network((0x20010DB8 << 96 | secrets.randbits(32) << 64, 64))
    assert get_health(str(network[1])).status_code == 200
    assert get_health(str(network[2**40])).status_code == 200
    # The same /64 with any interface identifier is the same client.
    assert get_health(str(network[secrets.randbits(64)])).status_code == 429
    next_network = network.network_address + 2**64
    assert get_health(str(next_network + 1)).status_code == 200


def test_forwarded_for_is_the_client_only_as_far_as_the_trusted_proxies(settings, limited, reports):
    settings.LOGIN_TRUSTED_PROXIES = 1
    ingress, client = new_address(), new_address()
    for _ in range(2):
        assert get_health(ingress, HTTP_X_FORWARDED_FOR=client).status_code == 200
    # What the client sent left of the entry the ingress appended does not make it another.
    spoofed = f"{new_address()}, {client}"
    assert get_health(ingress, HTTP_X_FORWARDED_FOR=spoofed).status_code == 429
    # Other clients behind the same ingress are counted apart.
    assert get_health(ingress, HTTP_X_FORWARDED_FOR=new_address()).status_code == 200

    # With no trusted proxy the header is the client's own word: the connection is counted.
    settings.LOGIN_TRUSTED_PROXIES = 0
    direct = new_address()
    answers = [get_health(direct, HTTP_X_FORWARDED_FOR=new_address()) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 429]


def test_a_port_the_proxy_writes_beside_the_address_is_not_another_client(
    settings, limited, reports
):
    settings.LOGIN_TRUSTED_PROXIES = 1
    ingress, client = new_address(), new_address()
    ports = [f"{client}:{port}" for port in (40001, 40002, 40003)]
    answers = [get_health(ingress, HTTP_X_FORWARDED_FOR=entry) for entry in ports]
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    v6 = f"2001:db8:{secrets.randbits(16):x}:{secrets.randbits(16):x}::7"
    answers = [get_health(ingress, HTTP_X_FORWARDED_FOR=f"[{v6}]:{p}") for p in (1, 2, 3)]
    assert [answer.status_code for answer in answers] == [200, 200, 429]


def test_health_is_served_when_the_limiters_redis_is_gone(limited, reports, monkeypatch, caplog):
    # Built as the limiter builds its own (a client made otherwise retries for seconds).
    dead = redis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    monkeypatch.setattr(ratelimit, "_client", dead)
    address = new_address()
    assert [get_health(address).status_code for _ in range(4)] == [200] * 4
    assert "rate limiter unavailable; request allowed" in caplog.text


def _readiness_probe() -> dict:
    documents = yaml.safe_load_all((ROOT / "k8s/control-plane/web.yaml").read_text())
    (web,) = (d for d in documents if d["kind"] == "Deployment")
    (container,) = web["spec"]["template"]["spec"]["containers"]
    return container["readinessProbe"]["httpGet"]


@pytest.mark.django_db
def test_the_readiness_probe_is_never_rate_limited_nor_asks_the_cluster(settings, reports, client):
    settings.HEALTH_RATE_PER_ADDRESS = "1/day"
    settings.DASHBOARD_RATE_PER_ADDRESS = "1/day"
    probe = _readiness_probe()
    headers = {
        "HTTP_" + header["name"].upper().replace("-", "_"): header["value"]
        for header in probe["httpHeaders"]
    }
    node = new_address()  # the kubelet probes every pod of its node from the node's address
    answers = [client.get(probe["path"], REMOTE_ADDR=node, **headers) for _ in range(5)]
    assert [(a.status_code, a.content) for a in answers] == [(200, b"ok\n")] * 5
    assert reports == []


def test_readiness_is_503_while_the_database_does_not_answer(client, monkeypatch):
    down = health.Check(False, 1.0, "OperationalError: connection refused")
    monkeypatch.setattr(health, "check_database", lambda: down)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert b"connection refused" not in response.content  # a public page names no internals


@pytest.mark.django_db
def test_the_schema_documents_the_429_of_health(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    responses = schema["paths"][HEALTH]["get"]["responses"]
    assert set(responses) >= {"200", "429", "503"}
    assert responses["429"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    assert "Retry-After" in responses["429"]["description"]


@pytest.mark.parametrize("variable", ["HEALTH_RATE_PER_ADDRESS", "DASHBOARD_RATE_PER_ADDRESS"])
def test_a_rate_that_is_not_one_stops_the_process(variable):
    env = {**os.environ, "DJANGO_DEBUG": "1", variable: "lots/min"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert f"{variable}: 'lots/min' is not a rate" in result.stderr
