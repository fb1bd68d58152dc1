"""Reaching a unit through the API, a real Celery worker and the simulated cluster: a unit
with ports gets its Service and NetworkPolicies (and, with a gateway configured, an HTTPRoute,
or with tcp access a NodePort), every object valid for Kubernetes 1.34, and the unit JSON and
GPUUnit status carry the URL that leads there. The seed runtime's ports-and-access request
works verbatim (less its storage mount: see the storage API)."""

from __future__ import annotations

import time
from pathlib import Path

import kubernetes_validate
import pytest

from catalog.tests.factories import PackageFactory
from conftest import start_worker, stop_worker
from controlplane import kube
from runtime import access, manifests
from runtime.models import GPUUnit
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.long]
DEV_GATEWAY = Path(__file__).resolve().parents[2] / "k8s" / "components" / "dev-gateway"
# The seed runtime's README request, but for its storageMounts.
SEED_REQUEST = {
    "operationID": "unit-demo-001",
    "name": "demo-instance",
    "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
    "image": "python:3.12",
    "template": {"ports": [{"name": "http", "port": 8080}]},
    "access": {"primaryPort": "http", "scheme": "http"},
}


@pytest.fixture(autouse=True)
def _package_and_cleanup(tenant, cluster):
    # `cluster`: the cleanup talks to it, also after a test that made nothing there (run
    # alone, or first on its worker, a 400 test would find no cluster configured).
    PackageFactory(article=True)
    yield
    for kind in (kube.SERVICE, kube.NETWORKPOLICY, kube.HTTPROUTE, kube.CONFIGMAP):
        try:
            for obj in kube.list_objects(kind, namespace=tenant.namespace):
                kube.delete(kind, tenant.namespace, obj["metadata"]["name"])
        except kube.KubeError:
            pass  # the HTTPRoute kind exists only once the dev gateway was applied
    remove_namespace_objects(tenant.namespace)
    for claim in kube.list_objects(kube.PERSISTENTVOLUMECLAIM, namespace=tenant.namespace):
        kube.delete(kube.PERSISTENTVOLUMECLAIM, tenant.namespace, claim["metadata"]["name"])


def order_and_run(client, body) -> tuple[GPUUnit, dict]:
    response = client.post("/api/v1/gpu-units", body, format="json")
    assert response.status_code == 201, response.json()
    unit = wait_for_phase(GPUUnit.objects.get(name=body["name"]), "Running")
    return unit, client.get(f"/api/v1/gpu-units/{unit.name}").json()["data"]


@pytest.mark.usefixtures("celery_worker")
def test_the_seed_request_gets_a_service_policies_and_its_in_cluster_url(auth_client, tenant):
    unit, shown = order_and_run(auth_client, SEED_REQUEST)
    url = f"http://unit-demo-instance.{tenant.namespace}.svc.cluster.local:8080"
    assert shown["access"] == {
        "primaryPort": "http",
        "scheme": "http",
        "url": url,
        "endpoints": [{"name": "http", "port": 8080, "protocol": "TCP", "url": url}],
    }
    service = kube.get(kube.SERVICE, tenant.namespace, "unit-demo-instance")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == {
        manifests.LABEL_UNIT: "demo-instance",
        manifests.LABEL_TENANT: tenant.slug,
    }
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(8080, "http")]
    pod = kube.get(kube.POD, tenant.namespace, "unit-demo-instance")
    assert pod["spec"]["containers"][0]["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"}
    ]
    tenant_policy = kube.get(kube.NETWORKPOLICY, tenant.namespace, manifests.TENANT_POLICY)
    # Nothing opened to the outside: the tenant's policy covers the unit, no policy of its own.
    assert kube.get(kube.NETWORKPOLICY, tenant.namespace, "unit-demo-instance") is None
    for obj in (service, tenant_policy):
        assert obj["metadata"]["labels"][manifests.LABEL_MANAGED_BY] == manifests.MANAGED_BY
        kubernetes_validate.validate(_as_sent(obj), "1.34.0", strict=True)
    gpuunit = kube.get(kube.GPUUNIT, tenant.namespace, "demo-instance")
    assert gpuunit["spec"]["template"]["ports"] == [
        {"name": "http", "port": 8080, "protocol": "TCP"}
    ]
    assert gpuunit["spec"]["access"] == {"primaryPort": "http", "scheme": "http"}
    _wait_for_status_access(tenant, url)

    assert auth_client.delete("/api/v1/gpu-units/demo-instance").status_code == 202
    wait_for_phase(unit, "Terminated")
    assert kube.get(kube.SERVICE, tenant.namespace, "unit-demo-instance") is None
    assert kube.get(kube.NETWORKPOLICY, tenant.namespace, "unit-demo-instance") is None
    # The tenant's isolation stays for its next unit.
    assert kube.get(kube.NETWORKPOLICY, tenant.namespace, manifests.TENANT_POLICY) is not None


def _wait_for_status_access(tenant, url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = kube.get(kube.GPUUNIT, tenant.namespace, "demo-instance").get("status") or {}
        if (status.get("access") or {}).get("url") == url:
            return
        time.sleep(0.2)
    pytest.fail(f"GPUUnit status.access never showed {url}: {status}")


def _as_sent(obj: dict) -> dict:
    """The object less what the server adds (status, managed metadata), for schema checks."""
    metadata = {
        k: v
        for k, v in obj["metadata"].items()
        if k in ("name", "namespace", "labels", "annotations", "ownerReferences")
    }
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": metadata,
        "spec": obj["spec"],
    }


@pytest.fixture
def gateway_worker(session_worker_paused, cluster, settings):
    """A worker (and this process) configured to publish HTTP units through the dev gateway,
    and tcp units on NodePorts, with the Gateway API CRDs applied to the cluster."""
    cluster.apply_manifests(DEV_GATEWAY)
    kube.reset()
    config = {
        "ACCESS_DOMAIN": "units.gpu.example.test",
        "ACCESS_GATEWAY": "gateway-system/gpu-gateway",
        "ACCESS_TCP_HOST": "gpu.example.test",
    }
    for name, value in config.items():
        setattr(settings, name, value)
    worker = start_worker("gateway", **config)
    yield
    stop_worker(worker)


@pytest.mark.usefixtures("gateway_worker")
def test_with_a_gateway_http_units_get_a_route_and_a_public_url(auth_client, tenant):
    _, shown = order_and_run(auth_client, SEED_REQUEST)
    host = access.hostname(tenant.namespace, "demo-instance", "units.gpu.example.test")
    assert shown["access"]["url"] == f"https://{host}"
    route = kube.get(kube.HTTPROUTE, tenant.namespace, "unit-demo-instance")
    assert route["spec"]["hostnames"] == [host]
    assert route["spec"]["parentRefs"][0]["name"] == "gpu-gateway"
    assert route["spec"]["parentRefs"][0]["namespace"] == "gateway-system"
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"name": "unit-demo-instance", "port": 8080}
    ]


@pytest.mark.usefixtures("gateway_worker")
def test_tcp_access_gets_a_node_port_admitted_by_the_unit_policy(auth_client, tenant):
    body = {
        **SEED_REQUEST,
        "operationID": "tcp-1",
        "name": "tcp-unit",
        "template": {"ports": [{"name": "db", "port": 5432}, {"name": "http", "port": 8080}]},
        "access": {"primaryPort": "db", "scheme": "tcp"},
    }
    _, shown = order_and_run(auth_client, body)
    service = kube.get(kube.SERVICE, tenant.namespace, "unit-tcp-unit")
    assert service["spec"]["type"] == "NodePort"
    node_port = next(p["nodePort"] for p in service["spec"]["ports"] if p["name"] == "db")
    assert shown["access"]["url"] == f"tcp://gpu.example.test:{node_port}"
    policy = kube.get(kube.NETWORKPOLICY, tenant.namespace, "unit-tcp-unit")
    public = [rule for rule in policy["spec"]["ingress"] if "ports" in rule]
    assert [p["port"] for p in public[0]["ports"]] == [5432]
    assert kube.get(kube.HTTPROUTE, tenant.namespace, "unit-tcp-unit") is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"template": {"ports": [{"name": "a" * 16, "port": 80}]}}, "template.ports[0].name"),
        (
            {"template": {"ports": [{"name": "a", "port": 80}, {"name": "a", "port": 81}]}},
            "template.ports[1].name",
        ),
        (
            {"template": {"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]}},
            "template.ports[1].port",
        ),
        ({"template": {"ports": [{"name": "a", "port": 0}]}}, "template.ports[0].port"),
        (
            {"template": {"ports": [{"name": "a", "port": 80, "protocol": "SCTP"}]}},
            "template.ports[0].protocol",
        ),
        ({"template": {}, "access": {"scheme": "http"}}, "access"),
        ({"access": {"primaryPort": "nope"}}, "access.primaryPort"),
        ({"access": {"scheme": "ftp"}}, "access.scheme"),
    ],
)
def test_bad_ports_and_access_are_400_naming_the_field_and_create_nothing(
    auth_client, change, field
):
    response = auth_client.post("/api/v1/gpu-units", {**SEED_REQUEST, **change}, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["details"]["fields"]
    assert not GPUUnit.objects.exists()


@pytest.mark.usefixtures("gateway_worker")
def test_a_unit_with_a_route_ssh_and_storage_at_once(auth_client, tenant):
    """The seed runtime's request with SSH on: every object it needs is in the cluster, valid
    for Kubernetes 1.34, and the unit JSON says how to reach it."""
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILSkOgILcqVAoeUWHkkxaz7JUr1aw5d3hCpJKnzFcYWi a@b"
    assert (
        auth_client.post(
            "/api/v1/ssh-keys", {"name": "laptop", "publicKey": key}, format="json"
        ).status_code
        == 201
    )
    storage = {"name": "model-cache", "size": "50Gi"}
    assert auth_client.post("/api/v1/gpu-storages", storage, format="json").status_code == 201
    body = {
        **SEED_REQUEST,
        "storageMounts": [{"name": "model-cache", "mountPath": "/data"}],
        "ssh": {"enabled": True},
    }
    _, shown = order_and_run(auth_client, body)
    namespace = tenant.namespace
    objects = {
        "route": kube.get(kube.HTTPROUTE, namespace, "unit-demo-instance"),
        "service": kube.get(kube.SERVICE, namespace, "unit-demo-instance"),
        "ssh-service": kube.get(kube.SERVICE, namespace, "unit-demo-instance-ssh"),
        "keys": kube.get(kube.CONFIGMAP, namespace, "unit-demo-instance-ssh"),
        "claim": kube.get(kube.PERSISTENTVOLUMECLAIM, namespace, "storage-model-cache"),
        "tenant-policy": kube.get(kube.NETWORKPOLICY, namespace, manifests.TENANT_POLICY),
        "unit-policy": kube.get(kube.NETWORKPOLICY, namespace, "unit-demo-instance"),
    }
    assert all(objects.values()), [name for name, obj in objects.items() if obj is None]
    assert objects["claim"]["status"]["phase"] == "Bound"
    for name, obj in objects.items():
        if name == "keys":
            kubernetes_validate.validate(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "k"},
                    "data": obj["data"],
                },
                "1.34.0",
                strict=True,
            )
        elif name != "route":
            kubernetes_validate.validate(_as_sent(obj), "1.34.0", strict=True)
    pod = kube.get(kube.POD, namespace, "unit-demo-instance")
    volumes = {v["name"] for v in pod["spec"]["volumes"]}
    assert volumes == {"dshm", "storage-model-cache", "ssh-keys"}
    node_port = objects["ssh-service"]["spec"]["ports"][0]["nodePort"]
    assert shown["ssh"]["command"] == f"ssh -p {node_port} runtime@gpu.example.test"
    host = access.hostname(namespace, "demo-instance", "units.gpu.example.test")
    assert shown["access"]["url"] == f"https://{host}"
    assert shown["storageMounts"] == [
        {"name": "model-cache", "mountPath": "/data", "readOnly": False}
    ]


@pytest.fixture
def ingress_worker(session_worker_paused, cluster, settings):
    """A worker (and this process) publishing HTTP units through an Ingress class instead."""
    config = {"ACCESS_DOMAIN": "units.gpu.example.test", "ACCESS_INGRESS_CLASS": "nginx"}
    for name, value in config.items():
        setattr(settings, name, value)
    worker = start_worker("ingress", **config)
    yield
    stop_worker(worker)


@pytest.mark.usefixtures("ingress_worker")
def test_with_an_ingress_class_http_units_get_an_ingress(auth_client, tenant):
    _, shown = order_and_run(auth_client, SEED_REQUEST)
    host = access.hostname(tenant.namespace, "demo-instance", "units.gpu.example.test")
    assert shown["access"]["url"] == f"https://{host}"
    ingress = kube.get(kube.INGRESS, tenant.namespace, "unit-demo-instance")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == host
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "unit-demo-instance", "port": {"number": 8080}}
    kubernetes_validate.validate(_as_sent(ingress), "1.34.0", strict=True)
    kube.delete(kube.INGRESS, tenant.namespace, "unit-demo-instance")
