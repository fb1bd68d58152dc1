"""A unit ordered through the API is reachable by its URL through the development gateway, as
under `make run`: the worker publishes it with an HTTPRoute from the dev component's Gateway,
and a request for the URL's host at the gateway's port reaches the unit's pod, where no
process runs (KWOK), so the page names the unit, its Service and pod."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from catalog.tests.factories import PackageFactory
from conftest import start_worker, stop_worker
from controlplane import kube
from devstack.gateway import Gateway
from runtime.models import GPUUnit
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
DEV_GATEWAY = Path(__file__).resolve().parents[1] / "k8s" / "components" / "dev-gateway"
# What `make run` configures (devstack.launcher.DEV_ACCESS).
ACCESS = {
    "ACCESS_DOMAIN": "units.localhost",
    "ACCESS_GATEWAY": "gateway-system/gpu-gateway",
    "ACCESS_PUBLIC_SCHEME": "http",
}
ORDER = {
    "operationID": "gateway-stack-1",
    "name": "web",
    "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
    "image": "python:3.12",
    "template": {
        "command": ["python", "-m", "http.server", "8080"],
        "ports": [{"name": "http", "port": 8080}],
    },
}


@pytest.fixture
def gateway(session_worker_paused, cluster, settings, tenant) -> Iterator[Gateway]:
    """The dev component's Gateway in the session's cluster, its data plane on a free port,
    and a worker (and this process) publishing HTTP units through it."""
    PackageFactory(article=True)
    cluster.apply_manifests(DEV_GATEWAY)
    kube.reset()
    for name, value in ACCESS.items():
        setattr(settings, name, value)
    worker = start_worker("gateway-stack", **ACCESS)
    data_plane = Gateway(cluster.api).start()
    yield data_plane
    data_plane.stop()
    stop_worker(worker)
    for kind in (kube.SERVICE, kube.NETWORKPOLICY, kube.HTTPROUTE):
        for obj in kube.list_objects(kind, namespace=tenant.namespace):
            kube.delete(kind, tenant.namespace, obj["metadata"]["name"])
    remove_namespace_objects(tenant.namespace)


def fetch(gateway: Gateway, url: str) -> tuple[int, str]:
    """GET `url` at the gateway's port, its Host kept (what `curl --connect-to` does)."""
    target = urlsplit(url)
    connection = http.client.HTTPConnection(gateway.host, gateway.port, timeout=10)
    try:
        connection.request("GET", target.path or "/", headers={"Host": target.netloc})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_a_units_url_through_the_gateway_reaches_its_pod_and_names_it(gateway, auth_client, tenant):
    response = auth_client.post("/api/v1/gpu-units", ORDER, format="json")
    assert response.status_code == 201, response.json()
    unit = wait_for_phase(GPUUnit.objects.get(name="web"), "Running")
    url = auth_client.get("/api/v1/gpu-units/web").json()["data"]["access"]["url"]
    assert urlsplit(url).hostname.endswith(".units.localhost")

    def reached() -> tuple[int, str] | None:
        answer = fetch(gateway, url)
        return answer if "No process serves this unit" in answer[1] else None

    status, page = wait_until(reached, "the unit's URL to reach its pod through the gateway")
    pod = kube.get(kube.POD, tenant.namespace, "unit-web")
    namespace = tenant.namespace
    assert status == 503
    assert f"HTTPRoute  {namespace}/unit-web (rule 0)" in page
    assert "Listener   Gateway gateway-system/gpu-gateway, listener http" in page
    assert f"Service    {namespace}/unit-web port 8080" in page
    assert f"Unit       GPUUnit {namespace}/web" in page
    assert (
        f"Pod        {namespace}/unit-web on node {pod['spec']['nodeName']} "
        f"({pod['status']['hostIP']}), pod IP {pod['status']['podIP']}, port 8080"
    ) in page
    # Another host under the domain has no route: 404, as a real gateway answers.
    assert fetch(gateway, url.replace("://", "://not-"))[0] == 404

    assert auth_client.delete("/api/v1/gpu-units/web").status_code == 202
    wait_for_phase(unit, "Terminated")
    status, page = fetch(gateway, url)
    assert status == 404, page
