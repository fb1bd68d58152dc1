"""Services (cluster IPs, node ports, load balancers), Secrets, ConfigMaps, NetworkPolicies and
Ingresses over HTTP with the official kubernetes client, as a 1.34 API server serves them."""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from simcluster.cluster import SimCluster
from simcluster.network import LOAD_BALANCER_POOL, SERVICE_CIDR


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def namespace(kube_api: client.ApiClient) -> Iterator[str]:
    name = _name("ns")
    client.CoreV1Api(kube_api).create_namespace({"metadata": {"name": name}})
    yield name
    client.CoreV1Api(kube_api).delete_namespace(name)


@pytest.fixture
def core(kube_api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)


def _error(exc_info: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return json.loads(exc_info.value.body)


def _service(name: str, service_type: str = "ClusterIP", **spec: Any) -> dict[str, Any]:
    ports = spec.pop("ports", [{"name": "http", "port": 80, "targetPort": 8080}])
    return {
        "metadata": {"name": name},
        "spec": {"type": service_type, "selector": {"app": name}, "ports": ports, **spec},
    }


class TestServices:
    def test_cluster_ip_is_assigned_from_the_service_cidr_when_absent(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        created = core.create_namespaced_service(namespace, _service("web"))
        assert ipaddress.ip_address(created.spec.cluster_ip) in SERVICE_CIDR
        assert created.spec.cluster_ips == [created.spec.cluster_ip]
        assert created.spec.ip_families == ["IPv4"]
        assert created.spec.session_affinity == "None"
        assert created.spec.ports[0].protocol == "TCP"
        assert created.spec.ports[0].node_port is None
        other = core.create_namespaced_service(namespace, _service("api"))
        assert other.spec.cluster_ip != created.spec.cluster_ip

    def test_headless_service_keeps_none_when_cluster_ip_is_none(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        created = core.create_namespaced_service(namespace, _service("db", clusterIP="None"))
        assert created.spec.cluster_ip == "None"
        assert created.spec.cluster_ips == ["None"]

    def test_requested_cluster_ip_is_refused_when_taken_or_out_of_range(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        with pytest.raises(ApiException) as taken:
            core.create_namespaced_service(namespace, _service("x", clusterIP="10.96.0.1"))
        assert taken.value.status == 422
        assert _error(taken)["message"] == (
            'Service "x" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.1"]: failed to '
            "allocate IP 10.96.0.1: provided IP is already allocated"
        )
        with pytest.raises(ApiException) as outside:
            core.create_namespaced_service(namespace, _service("y", clusterIP="192.168.1.1"))
        assert (
            "is not in the valid range. The range of valid IPs is 10.96.0.0/12"
            in (_error(outside)["message"])
        )

    def test_node_ports_are_assigned_per_port_when_type_is_node_port(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        ports = [{"name": "http", "port": 80}, {"name": "ssh", "port": 22}]
        created = core.create_namespaced_service(namespace, _service("np", "NodePort", ports=ports))
        node_ports = [port.node_port for port in created.spec.ports]
        assert all(30000 <= port <= 32767 for port in node_ports)
        assert len(set(node_ports)) == 2
        assert created.spec.external_traffic_policy == "Cluster"
        assert created.spec.ports[0].target_port == 80

    def test_duplicate_node_port_is_a_422_like_the_real_allocator(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        first = core.create_namespaced_service(namespace, _service("a", "NodePort"))
        taken = first.spec.ports[0].node_port
        with pytest.raises(ApiException) as exc_info:
            core.create_namespaced_service(
                namespace, _service("b", "NodePort", ports=[{"port": 80, "nodePort": taken}])
            )
        assert exc_info.value.status == 422
        body = _error(exc_info)
        assert body["reason"] == "Invalid"
        assert body["message"] == (
            f'Service "b" is invalid: spec.ports[0].nodePort: Invalid value: {taken}: provided '
            "port is already allocated"
        )
        with pytest.raises(ApiException) as out_of_range:
            core.create_namespaced_service(
                namespace, _service("c", "NodePort", ports=[{"port": 80, "nodePort": 80}])
            )
        assert "The range of valid ports is 30000-32767" in _error(out_of_range)["message"]

    def test_node_port_is_refused_when_type_is_cluster_ip(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        with pytest.raises(ApiException) as exc_info:
            core.create_namespaced_service(
                namespace, _service("c", ports=[{"port": 80, "nodePort": 30999}])
            )
        assert _error(exc_info)["message"] == (
            'Service "c" is invalid: spec.ports[0].nodePort: Forbidden: may not be used when '
            "`type` is 'ClusterIP'"
        )

    def test_load_balancer_gets_an_address_from_the_pool(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        created = core.create_namespaced_service(namespace, _service("lb", "LoadBalancer"))
        ingress = created.status.load_balancer.ingress
        assert ipaddress.ip_address(ingress[0].ip) in LOAD_BALANCER_POOL
        assert created.spec.ports[0].node_port
        assert created.spec.allocate_load_balancer_node_ports is True
        other = core.create_namespaced_service(namespace, _service("lb2", "LoadBalancer"))
        assert other.status.load_balancer.ingress[0].ip != ingress[0].ip

    def test_update_without_allocated_values_keeps_them(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        created = core.create_namespaced_service(namespace, _service("keep", "NodePort"))
        manifest = _service("keep", "NodePort")
        manifest["metadata"]["labels"] = {"tier": "web"}
        replaced = core.replace_namespaced_service("keep", namespace, manifest)
        assert replaced.spec.cluster_ip == created.spec.cluster_ip
        assert replaced.spec.ports[0].node_port == created.spec.ports[0].node_port
        with pytest.raises(ApiException) as exc_info:
            core.patch_namespaced_service(
                "keep", namespace, {"spec": {"clusterIP": "10.96.200.200"}}
            )
        assert "may not change once set" in _error(exc_info)["message"]

    def test_node_port_is_free_again_when_its_service_is_deleted(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        created = core.create_namespaced_service(namespace, _service("gone", "NodePort"))
        port = created.spec.ports[0].node_port
        core.delete_namespaced_service("gone", namespace)
        again = core.create_namespaced_service(
            namespace, _service("again", "NodePort", ports=[{"port": 80, "nodePort": port}])
        )
        assert again.spec.ports[0].node_port == port

    def test_system_services_exist_when_the_cluster_starts(self, core: client.CoreV1Api) -> None:
        assert core.read_namespaced_service("kubernetes", "default").spec.cluster_ip == (
            "10.96.0.1"
        )
        dns = core.read_namespaced_service("kube-dns", "kube-system")
        assert dns.spec.cluster_ip == "10.96.0.10"


class TestSecrets:
    def test_string_data_is_merged_into_base64_data_and_not_stored(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        created = core.create_namespaced_secret(
            namespace,
            {
                "metadata": {"name": "keys"},
                "data": {"a": base64.b64encode(b"old").decode(), "b": "Yg=="},
                "stringData": {"a": "ssh-ed25519 AAAA new"},
            },
        )
        assert created.type == "Opaque"
        assert created.string_data is None
        assert base64.b64decode(created.data["a"]) == b"ssh-ed25519 AAAA new"
        assert created.data["b"] == "Yg=="
        patched = core.patch_namespaced_secret("keys", namespace, {"stringData": {"c": "three"}})
        assert base64.b64decode(patched.data["c"]) == b"three"
        assert set(patched.data) == {"a", "b", "c"}
        assert patched.string_data is None

    def test_invalid_base64_is_a_400_that_does_not_echo_the_value(
        self, sim: SimCluster, namespace: str
    ) -> None:
        status, body = _raw(
            sim,
            "POST",
            f"/api/v1/namespaces/{namespace}/secrets",
            {"metadata": {"name": "bad"}, "data": {"k": "not base64!hunter2"}},
        )
        assert status == 400
        assert "hunter2" not in json.dumps(body)

    def test_immutable_secret_refuses_data_changes(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        core.create_namespaced_secret(
            namespace, {"metadata": {"name": "frozen"}, "stringData": {"k": "v"}, "immutable": True}
        )
        with pytest.raises(ApiException) as exc_info:
            core.patch_namespaced_secret("frozen", namespace, {"stringData": {"k": "w"}})
        assert exc_info.value.status == 422
        assert "field is immutable when `immutable` is set" in _error(exc_info)["message"]
        assert "dw==" not in exc_info.value.body

    def test_secret_values_are_never_logged(
        self, core: client.CoreV1Api, namespace: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.DEBUG)
        core.create_namespaced_secret(
            namespace, {"metadata": {"name": "quiet"}, "stringData": {"k": "s3cr3t-material"}}
        )
        core.read_namespaced_secret("quiet", namespace)
        assert "s3cr3t-material" not in caplog.text
        assert base64.b64encode(b"s3cr3t-material").decode() not in caplog.text

    def test_config_map_key_must_be_a_valid_config_key(
        self, core: client.CoreV1Api, namespace: str
    ) -> None:
        created = core.create_namespaced_config_map(
            namespace, {"metadata": {"name": "cfg"}, "data": {"app.conf": "x=1"}}
        )
        assert created.data == {"app.conf": "x=1"}
        with pytest.raises(ApiException) as exc_info:
            core.create_namespaced_config_map(
                namespace, {"metadata": {"name": "bad"}, "data": {"a b": "x"}}
            )
        assert exc_info.value.status == 422
        assert (
            "a valid config key must consist of alphanumeric characters"
            in (_error(exc_info)["message"])
        )


class TestNetworking:
    def test_network_policy_defaults_policy_types_from_its_rules(
        self, kube_api: client.ApiClient, namespace: str
    ) -> None:
        networking = client.NetworkingV1Api(kube_api)
        ingress_only = networking.create_namespaced_network_policy(
            namespace, {"metadata": {"name": "deny"}, "spec": {"podSelector": {}}}
        )
        assert ingress_only.spec.policy_types == ["Ingress"]
        both = networking.create_namespaced_network_policy(
            namespace,
            {
                "metadata": {"name": "dns"},
                "spec": {
                    "podSelector": {},
                    "egress": [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53}]}],
                },
            },
        )
        assert both.spec.policy_types == ["Ingress", "Egress"]
        assert both.spec.egress[0].ports[1].protocol == "TCP"
        listed = networking.list_namespaced_network_policy(namespace)
        assert sorted(p.metadata.name for p in listed.items) == ["deny", "dns"]

    def test_ingress_gets_the_ingress_controller_address(
        self, sim: SimCluster, kube_api: client.ApiClient, namespace: str
    ) -> None:
        networking = client.NetworkingV1Api(kube_api)
        created = networking.create_namespaced_ingress(
            namespace,
            {
                "metadata": {"name": "web"},
                "spec": {
                    "ingressClassName": "nginx",
                    "rules": [
                        {
                            "host": "web.example.com",
                            "http": {
                                "paths": [
                                    {
                                        "path": "/",
                                        "pathType": "Prefix",
                                        "backend": {
                                            "service": {"name": "web", "port": {"number": 80}}
                                        },
                                    }
                                ]
                            },
                        }
                    ],
                },
            },
        )
        address = created.status.load_balancer.ingress[0].ip
        assert ipaddress.ip_address(address) in LOAD_BALANCER_POOL
        # The typed client refuses to send a path without pathType; the server refuses it too.
        bad = {
            "metadata": {"name": "bad"},
            "spec": {
                "rules": [
                    {"http": {"paths": [{"path": "/", "backend": {"service": {"name": "web"}}}]}}
                ]
            },
        }
        status, body = _raw(
            sim, "POST", f"/apis/networking.k8s.io/v1/namespaces/{namespace}/ingresses", bad
        )
        assert status == 422
        assert "spec.rules[0].http.paths[0].pathType: Required value" in body["message"]


def _raw(sim: SimCluster, method: str, path: str, body: Any) -> tuple[int, dict]:
    request = urllib.request.Request(
        sim.url + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
