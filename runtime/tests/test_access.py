"""Reaching a unit (pure): hostnames valid DNS for every allowed unit and tenant name, the URL
and endpoints a unit shows, and the Service, route, Ingress and NetworkPolicies behind them,
each valid for Kubernetes 1.34 (strict). The NetworkPolicies are also read by a small
evaluator of their semantics, table-driven: which peer addresses and pods each admits."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import types

import kubernetes_validate
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime import access, manifests
from runtime.tests.test_manifests import CONTRACT, OWNER_UID

WITH_PORTS = dataclasses.replace(
    CONTRACT,
    ports=[
        {"name": "http", "port": 8080, "protocol": "TCP"},
        {"name": "metrics", "port": 9100, "protocol": "TCP"},
    ],
    access={"primaryPort": "http", "scheme": "http"},
)
GATEWAY = access.AccessConfig(domain="units.gpu.example.com", gateway="gateway-system/gpu")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
dns_labels = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")


@given(
    namespace=dns_labels,
    unit=dns_labels.filter(lambda name: len(name) <= 54),
    candidate=st.integers(min_value=0, max_value=10**6),
)
def test_host_labels_are_dns_labels_for_every_name(namespace, unit, candidate):
    label = access.host_label(namespace, unit, candidate)
    assert len(label) <= 63
    assert _LABEL.fullmatch(label)
    assert label[2:4] != "--"  # reserved for IDNA (xn--)
    # 13 base32 characters, 65 bits: crafting a name with another unit's label (a second
    # preimage) takes more than 2^60 tries.
    assert re.fullmatch(r"[a-z2-7]{13}", label.rsplit("-", 1)[1])


def test_host_labels_fit_a_dns_label_at_every_length_of_unit_and_namespace():
    for unit_length in range(1, 55):
        for namespace_length in range(1, 64):
            unit, namespace = "u" * unit_length, "t" * namespace_length
            for candidate in (0, 1):
                label = access.host_label(namespace, unit, candidate)
                assert len(label) <= 63, (unit_length, namespace_length)
                assert _LABEL.fullmatch(label), label
                assert len(label.rsplit("-", 1)[1]) == 13, label


@given(namespace=dns_labels, unit=dns_labels.filter(lambda name: len(name) <= 54))
def test_the_next_candidate_label_differs_only_in_its_hash(namespace, unit):
    first, second = access.host_label(namespace, unit), access.host_label(namespace, unit, 1)
    assert first != second
    assert first.rsplit("-", 1)[0] == second.rsplit("-", 1)[0]
    assert access.host_label(namespace, unit, 2) not in (first, second)


def test_the_public_url_is_the_stored_label_s_and_the_computed_one_without():
    unit = types.SimpleNamespace(
        name=WITH_PORTS.name,
        namespace=WITH_PORTS.namespace,
        template={"ports": WITH_PORTS.ports},
        access=WITH_PORTS.access,
        host_label="stored-label",
    )
    assert access.for_unit(unit, GATEWAY)["url"] == "https://stored-label.units.gpu.example.com"
    unit.host_label = ""  # a row not written by an order
    computed = access.hostname(WITH_PORTS.namespace, WITH_PORTS.name, GATEWAY.domain)
    assert access.for_unit(unit, GATEWAY)["url"] == f"https://{computed}"


@pytest.mark.parametrize("length", [1, 20, 54])
@pytest.mark.parametrize("namespace_length", [1, 30, 63])
def test_host_labels_at_every_length_stay_readable_and_distinct(length, namespace_length):
    unit, namespace = "u" * length, "t" * namespace_length
    label = access.host_label(namespace, unit)
    assert label.startswith("u")
    assert "t" in label
    # Units differing only past the cut still get labels of their own.
    sibling = unit[:-1] + "v"
    assert access.host_label(namespace, sibling) != label


def test_names_that_join_alike_get_different_hosts():
    # "a-b" in namespace "c" and "a" in namespace "b-c" would both read a-b-c.
    assert access.host_label("c", "a-b") != access.host_label("b-c", "a")


def describe(contract, config, **extra):
    return access.describe(
        unit=contract.name,
        namespace=contract.namespace,
        ports=contract.ports,
        access=contract.access,
        config=config,
        **extra,
    )


def test_http_through_the_gateway_gets_a_public_url_other_ports_stay_in_cluster():
    shown = describe(WITH_PORTS, GATEWAY)
    host = access.hostname("runtime-instance", "demo-instance", "units.gpu.example.com")
    assert shown["url"] == f"https://{host}"
    assert shown["endpoints"] == [
        {"name": "http", "port": 8080, "protocol": "TCP", "url": f"https://{host}"},
        {
            "name": "metrics",
            "port": 9100,
            "protocol": "TCP",
            "url": "tcp://unit-demo-instance.runtime-instance.svc.cluster.local:9100",
        },
    ]


def test_without_a_gateway_the_url_is_the_in_cluster_one_as_the_seed_runtime_had():
    shown = describe(WITH_PORTS, access.AccessConfig())
    assert shown["url"] == "http://unit-demo-instance.runtime-instance.svc.cluster.local:8080"


def test_tcp_access_shows_the_node_port_once_the_service_has_one():
    tcp = dataclasses.replace(WITH_PORTS, access={"primaryPort": "http", "scheme": "tcp"})
    config = access.AccessConfig(tcp_service_type="NodePort", tcp_host="gpu.example.com")
    assert describe(tcp, config)["url"] is None
    assert describe(tcp, config, node_ports={"http": 31022})["url"] == "tcp://gpu.example.com:31022"
    balanced = dataclasses.replace(config, tcp_service_type="LoadBalancer")
    assert describe(tcp, balanced, load_balancer="192.0.2.7")["url"] == "tcp://192.0.2.7:8080"


def test_no_ports_no_url():
    assert describe(CONTRACT, GATEWAY) == {"url": None, "endpoints": []}


OBJECTS = {
    "service": lambda: manifests.build_service(
        WITH_PORTS, owner_uid=OWNER_UID, service_type="ClusterIP"
    ),
    "service-nodeport": lambda: manifests.build_service(
        WITH_PORTS, owner_uid=OWNER_UID, service_type="NodePort"
    ),
    "ingress": lambda: manifests.build_ingress(
        WITH_PORTS, owner_uid=OWNER_UID, hostname="a.example.com", ingress_class="nginx", port=8080
    ),
    "pod": lambda: manifests.build_pod(WITH_PORTS, owner_uid=OWNER_UID),
    "tenant-policy": lambda: manifests.build_tenant_network_policy(
        "runtime-instance",
        tenant="default",
        gateway_namespace="gateway-system",
        egress_allow=["10.20.0.0/16"],
    ),
    "unit-policy": lambda: manifests.build_unit_network_policy(
        WITH_PORTS, owner_uid=OWNER_UID, public_ports=[{"port": 8080}]
    ),
    "pod-with-ssh-and-storage": lambda: manifests.build_pod(
        dataclasses.replace(
            WITH_PORTS,
            ssh=True,
            ssh_image="registry.example.com/gpu-unit-sshd:1",
            memory_bytes=40 * 2**30,
            storage_mounts=[{"name": "model-cache", "mountPath": "/data", "readOnly": True}],
        ),
        owner_uid=OWNER_UID,
    ),
    "ssh-service": lambda: manifests.build_ssh_service(
        WITH_PORTS, owner_uid=OWNER_UID, service_type="NodePort"
    ),
    "ssh-config-map": lambda: manifests.build_ssh_config_map(
        WITH_PORTS, owner_uid=OWNER_UID, public_keys=["ssh-ed25519 AAAA"]
    ),
    "storage-claim": lambda: manifests.build_storage_claim(
        namespace="runtime-instance",
        tenant="default",
        name="model-cache",
        size="50Gi",
        storage_class="standard",
        access_mode="ReadWriteOnce",
    ),
}


@pytest.mark.parametrize("build", OBJECTS.values(), ids=OBJECTS.keys())
def test_access_objects_validate_against_kubernetes_1_34_strict(build):
    kubernetes_validate.validate(build(), "1.34.0", strict=True)


def test_the_route_sends_the_unit_s_host_to_its_service_from_the_configured_gateway():
    route = manifests.build_http_route(
        WITH_PORTS,
        owner_uid=OWNER_UID,
        hostname="h.example.com",
        gateway_namespace="gateway-system",
        gateway_name="gpu",
        port=8080,
    )
    assert (
        route["spec"]["parentRefs"][0] | {"namespace": "gateway-system", "name": "gpu"}
        == (route["spec"]["parentRefs"][0])
    )
    assert route["spec"]["hostnames"] == ["h.example.com"]
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"name": "unit-demo-instance", "port": 8080}
    ]
    assert route["metadata"]["ownerReferences"][0]["uid"] == OWNER_UID


# --- A small evaluator of NetworkPolicy semantics (networking.k8s.io/v1), for the tables.


def _selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_admits(peer: dict, source: dict, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        if "ip" not in source:
            return False
        ip = ipaddress.ip_address(source["ip"])
        block = peer["ipBlock"]
        network = ipaddress.ip_network(block["cidr"])
        if ip.version != network.version or ip not in network:
            return False
        return not any(
            ip in ipaddress.ip_network(cidr)
            for cidr in block.get("except", [])
            if ipaddress.ip_network(cidr).version == ip.version
        )
    if "pod" not in source:
        return False
    if "namespaceSelector" in peer:
        namespace_ok = _selects(peer["namespaceSelector"], source["namespace_labels"])
    else:
        namespace_ok = source["namespace"] == policy_namespace
    pod_ok = _selects(peer.get("podSelector", {}), source["pod"])
    return namespace_ok and pod_ok


def _port_admits(rule: dict, port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    return not ports or any(
        p.get("protocol", "TCP") == protocol and p.get("port") in (None, port) for p in ports
    )


def admitted(policies, direction, pod, namespace, other, port=80, protocol="TCP") -> bool:
    """Whether traffic between `pod` (in `namespace`) and `other` is allowed in `direction`
    ("Ingress": other → pod; "Egress": pod → other) by these policies."""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == namespace
        and direction in p["spec"]["policyTypes"]
        and _selects(p["spec"]["podSelector"], pod)
    ]
    if not selecting:
        return True
    key = "from" if direction == "Ingress" else "to"
    return any(
        _port_admits(rule, port, protocol)
        and (key not in rule or any(_peer_admits(peer, other, namespace) for peer in rule[key]))
        for policy in selecting
        for rule in policy["spec"].get(direction.lower(), [])
    )


POLICIES = [OBJECTS["tenant-policy"](), OBJECTS["unit-policy"]()]
UNIT_POD = manifests._unit_selector(WITH_PORTS)
NS = "runtime-instance"


def ns_pod(namespace: str, labels: dict | None = None) -> dict:
    return {
        "pod": labels or {"app": "x"},
        "namespace": namespace,
        "namespace_labels": {"kubernetes.io/metadata.name": namespace},
    }


@pytest.mark.parametrize(
    ("ip", "allowed"),
    [
        ("93.184.216.34", True),  # the internet
        ("2606:2800:220:1::1", True),
        ("10.1.2.3", False),  # private, the cluster's own networks among them
        ("172.20.0.1", False),
        ("192.168.1.1", False),
        ("100.64.0.1", False),  # carrier-grade NAT
        ("169.254.169.254", False),  # cloud metadata
        ("127.0.0.1", False),
        ("fd00:ec2::254", False),  # AWS metadata over IPv6
        ("fe80::1", False),
        ("10.20.5.5", True),  # the allow-list
    ],
)
def test_egress_reaches_the_internet_and_the_allow_list_not_private_or_metadata(ip, allowed):
    assert admitted(POLICIES, "Egress", UNIT_POD, NS, {"ip": ip}, port=443) is allowed


@pytest.mark.parametrize(
    ("other", "port", "protocol", "allowed"),
    [
        (ns_pod("kube-system", {"k8s-app": "kube-dns"}), 53, "UDP", True),
        (ns_pod("kube-system", {"k8s-app": "kube-dns"}), 53, "TCP", True),
        (ns_pod("kube-system", {"k8s-app": "kube-dns"}), 443, "TCP", False),
        (ns_pod("kube-system", {"k8s-app": "other"}), 53, "UDP", False),
        (ns_pod("other-tenant", {"k8s-app": "kube-dns"}), 53, "UDP", False),
        (ns_pod("other-tenant"), 80, "TCP", False),  # another tenant's pod (its pod IP is private)
    ],
)
def test_egress_to_pods_is_dns_only(other, port, protocol, allowed):
    assert (
        admitted(POLICIES, "Egress", UNIT_POD, NS, other, port=port, protocol=protocol) is allowed
    )


@pytest.mark.parametrize(
    ("other", "port", "allowed"),
    [
        (ns_pod("gateway-system"), 8080, True),  # the gateway
        (ns_pod(NS, UNIT_POD), 9100, True),  # the same unit
        (ns_pod(NS, {**UNIT_POD, manifests.LABEL_UNIT: "other"}), 8080, False),  # a sibling unit
        (ns_pod("other-tenant"), 8080, False),  # another tenant
        ({"ip": "203.0.113.9"}, 8080, True),  # the exposed port, from outside
        ({"ip": "203.0.113.9"}, 9100, False),  # a port that is not exposed
        ({"ip": "10.0.3.4"}, 8080, False),  # a private address (a pod, a node) on it
    ],
)
def test_ingress_only_from_the_gateway_the_same_unit_and_exposed_ports(other, port, allowed):
    assert admitted(POLICIES, "Ingress", UNIT_POD, NS, other, port=port) is allowed
