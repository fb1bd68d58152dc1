"""The simulated gateway over HTTP: a SimCluster serving its data plane, the dev component's
Gateway, and a Service and pod applied as a user would. Requests are routed by Host, the page
follows the pod through its life, and HTTPRoute status says whether its backendRefs resolve."""

from __future__ import annotations

import http.client
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from simcluster.cluster import SimCluster
from simcluster.gatewayapi import HTTP_ROUTES
from simcluster.tests.conftest import wait_until

DEV_GATEWAY = Path(__file__).resolve().parents[2] / "k8s" / "components" / "dev-gateway"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with SimCluster(topology={"generate": {"nodes": 1, "gpus_per_node": 1}}, gateway_port=0) as sim:
        sim.apply_manifests(DEV_GATEWAY)
        yield sim


@pytest.fixture
def namespace(cluster: SimCluster) -> Iterator[str]:
    name = f"gw-{uuid.uuid4().hex[:8]}"
    cluster.store.create("namespaces", {"metadata": {"name": name}})
    yield name
    cluster.store.delete("namespaces", None, name)


def request(
    cluster: SimCluster, host: str, path: str = "/", *, method: str = "GET", **headers: str
) -> tuple[int, dict[str, str], str]:
    assert cluster.gateway is not None
    connection = http.client.HTTPConnection("127.0.0.1", cluster.gateway.port, timeout=10)
    try:
        connection.request(method, path, headers={"Host": host, **headers})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        connection.close()


def unit_objects(cluster: SimCluster, namespace: str, host: str, *, service: str = "web") -> None:
    cluster.store.create(
        "services",
        {
            "metadata": {"name": service, "namespace": namespace},
            "spec": {
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 8080, "targetPort": "http"}],
            },
        },
    )
    cluster.store.create(
        HTTP_ROUTES,
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "parentRefs": [{"name": "gpu-gateway", "namespace": "gateway-system"}],
                "hostnames": [host],
                "rules": [{"backendRefs": [{"name": "web", "port": 8080}]}],
            },
        },
    )


def create_pod(cluster: SimCluster, namespace: str) -> None:
    cluster.store.create(
        "pods",
        {
            "metadata": {"name": "web-0", "namespace": namespace, "labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {
                        "name": "web",
                        "image": "python:3.12",
                        "ports": [{"name": "http", "containerPort": 8080}],
                    }
                ]
            },
        },
    )


def test_a_request_follows_the_route_to_the_pod_as_it_starts_and_goes(
    cluster: SimCluster, namespace: str
) -> None:
    host = f"web.{namespace}.units.localhost"
    unit_objects(cluster, namespace, host)
    status, headers, body = request(cluster, host)
    assert status == 503
    assert body.splitlines()[2].startswith(f"no healthy upstream: Service {namespace}/web")

    create_pod(cluster, namespace)
    status, headers, body = wait_until(
        lambda: request(cluster, f"{host}:8003", "/lab?token=x"),
        lambda answer: "No process serves this unit" in answer[2],
        "the gateway to reach the pod once it runs",
    )
    pod = cluster.store.get("pods", namespace, "web-0")
    assert pod is not None
    assert status == 503
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert f"HTTPRoute  {namespace}/web (rule 0)" in body
    assert f"Service    {namespace}/web port 8080" in body
    assert (
        f"Pod        {namespace}/web-0 on node {pod['spec']['nodeName']} "
        f"({pod['status']['hostIP']}), pod IP {pod['status']['podIP']}, port 8080"
    ) in body

    cluster.store.delete("pods", namespace, "web-0")
    wait_until(
        lambda: request(cluster, host)[2],
        lambda page: "no healthy upstream" in page,
        "the gateway to lose the pod once it is deleted",
    )


def test_unknown_hosts_are_404_and_browsers_get_html(cluster: SimCluster, namespace: str) -> None:
    unit_objects(cluster, namespace, f"web.{namespace}.units.localhost")
    status, _, body = request(cluster, f"other.{namespace}.units.localhost")
    assert status == 404
    assert "No HTTPRoute attached to the gateway matches" in body
    status, headers, body = request(
        cluster, f"web.{namespace}.units.localhost", Accept="text/html,*/*"
    )
    assert (status, headers["Content-Type"]) == (503, "text/html; charset=utf-8")
    assert "<h1>503 Service Unavailable</h1>" in body


def test_every_method_is_routed_and_a_kept_alive_connection_serves_the_next_request(
    cluster: SimCluster, namespace: str
) -> None:
    host = f"web.{namespace}.units.localhost"
    unit_objects(cluster, namespace, host)
    assert cluster.gateway is not None
    connection = http.client.HTTPConnection("127.0.0.1", cluster.gateway.port, timeout=10)
    try:
        for method, body in (("POST", b'{"prompt": "hi"}'), ("DELETE", None), ("HEAD", None)):
            connection.request(method, "/v1/chat", body=body, headers={"Host": host})
            response = connection.getresponse()
            payload = response.read()
            assert response.status == 503, method
            assert (payload == b"") is (method == "HEAD")
    finally:
        connection.close()


def test_route_status_says_whether_its_backend_refs_resolve(
    cluster: SimCluster, namespace: str
) -> None:
    unit_objects(cluster, namespace, f"web.{namespace}.units.localhost", service="not-web")
    route = cluster.store.get(HTTP_ROUTES, namespace, "web")
    assert route is not None
    conditions = {c["type"]: c for c in route["status"]["parents"][0]["conditions"]}
    assert conditions["Accepted"]["status"] == "True"
    assert (conditions["ResolvedRefs"]["status"], conditions["ResolvedRefs"]["reason"]) == (
        "False",
        "BackendNotFound",
    )
    assert conditions["ResolvedRefs"]["message"] == f"Service {namespace}/web not found"
    status, _, body = request(cluster, f"web.{namespace}.units.localhost")
    assert status == 500
    assert "The HTTPRoute's backendRef is invalid" in body
