"""Network isolation that names the cluster (pure): the tenant namespace's NetworkPolicy and a
unit's, as provisioning builds them from the settings of a cluster whose pod, service and node
ranges are not private (IPv4 and IPv6), read by a small evaluator of NetworkPolicy semantics
against addresses of both families.

The evaluator lets an ipBlock match a pod's address too: the API leaves that to the network
plugin, and several match pod addresses by CIDR, so a rule meaning "the internet" has to leave
the cluster's own ranges out itself."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import kubernetes_validate
import pytest

from controlplane import kube
from runtime import manifests
from runtime.control import provisioning
from runtime.tests.test_manifests import CONTRACT, OWNER_UID
from tenancy.models import Tenant

# --- NetworkPolicy semantics (networking.k8s.io/v1): which connections a set of policies allows.


@dataclass(frozen=True)
class Endpoint:
    """One end of a connection: an address, and for a pod its namespace, labels and named
    container ports (a node, a Service address or a host on the internet has none of these)."""

    ip: str
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    ports: Mapping[str, int] = field(default_factory=dict)

    @property
    def is_pod(self) -> bool:
        return bool(self.namespace)


def selects(selector: Mapping, labels: Mapping[str, str]) -> bool:
    """A LabelSelector: every matchLabels pair and every matchExpressions requirement holds."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for requirement in selector.get("matchExpressions") or []:
        key, operator = requirement["key"], requirement["operator"]
        values = requirement.get("values") or []
        holds = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not holds:
            return False
    return True


def in_ip_block(block: Mapping, ip: str) -> bool:
    """An ipBlock holds the addresses of its cidr except those of any `except` entry (an
    address never belongs to a network of the other family)."""
    address = ipaddress.ip_address(ip)
    if address not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(address in ipaddress.ip_network(cidr) for cidr in block.get("except") or [])


def _peer_matches(peer: Mapping, other: Endpoint, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return in_ip_block(peer["ipBlock"], other.ip)
    if not other.is_pod:
        return False
    if "namespaceSelector" in peer:
        namespace_labels = {"kubernetes.io/metadata.name": other.namespace}
        if not selects(peer["namespaceSelector"], namespace_labels):
            return False
    elif other.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector") or {}, other.labels)


def _port_matches(rule_port: Mapping, port: int, protocol: str, named: Mapping[str, int]) -> bool:
    if rule_port.get("protocol", "TCP") != protocol:
        return False
    wanted = rule_port.get("port")
    if wanted is None:
        return True
    if isinstance(wanted, str):  # a named port of the destination pod
        return named.get(wanted) == port
    return wanted <= port <= rule_port.get("endPort", wanted)


def _policy_types(policy: Mapping) -> list[str]:
    spec = policy["spec"]
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if "egress" in spec else [])]


def _admits(
    policies: Iterable[Mapping],
    pod: Endpoint,
    direction: str,
    peer: Endpoint,
    port: int,
    protocol: str,
    named: Mapping[str, int],
) -> bool:
    """Whether the policies selecting `pod` for `direction` let `peer` through: a pod no such
    policy selects is not isolated; an isolated one takes what any rule of any of them allows."""
    selecting = [
        policy
        for policy in policies
        if policy["metadata"]["namespace"] == pod.namespace
        and direction in _policy_types(policy)
        and selects(policy["spec"]["podSelector"], pod.labels)
    ]
    if not selecting:
        return True
    key = "from" if direction == "Ingress" else "to"
    return any(
        (
            not rule.get("ports")
            or any(_port_matches(p, port, protocol, named) for p in rule["ports"])
        )
        and (
            not rule.get(key)
            or any(_peer_matches(p, peer, policy["metadata"]["namespace"]) for p in rule[key])
        )
        for policy in selecting
        for rule in policy["spec"].get(direction.lower()) or []
    )


def allows(
    policies: Iterable[Mapping],
    source: Endpoint,
    destination: Endpoint,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """Whether `source` may open a connection to `destination` on `port`: the source pod's
    egress and the destination pod's ingress must both let it through (an end that is not a
    pod has no policy of its own)."""
    policies = list(policies)
    named = destination.ports
    if source.is_pod and not _admits(
        policies, source, "Egress", destination, port, protocol, named
    ):
        return False
    return not destination.is_pod or _admits(
        policies, destination, "Ingress", source, port, protocol, named
    )


def ip_block_problems(policy: Mapping) -> list[str]:
    """What the API server's ipBlock validation refuses: a cidr or except entry that is not a
    network in canonical form, or an except entry that is not a strict subset of its cidr (an
    IPv6 entry in an IPv4 block among them)."""
    problems = []
    spec = policy["spec"]
    for rule in [*(spec.get("ingress") or []), *(spec.get("egress") or [])]:
        for peer in [*(rule.get("from") or []), *(rule.get("to") or [])]:
            block = peer.get("ipBlock")
            if block is None:
                continue
            cidr = ipaddress.ip_network(block["cidr"])
            if str(cidr) != block["cidr"]:
                problems.append(f"cidr {block['cidr']} is not canonical")
            for entry in block.get("except") or []:
                excepted = ipaddress.ip_network(entry)
                if str(excepted) != entry:
                    problems.append(f"except {entry} is not canonical")
                if (
                    excepted.version != cidr.version
                    or not excepted.subnet_of(cidr)
                    or excepted.prefixlen <= cidr.prefixlen
                ):
                    problems.append(f"except {entry} is not a strict subset of {cidr}")
    return problems


def assert_valid(policy: dict) -> None:
    kubernetes_validate.validate(policy, "1.34.0", strict=True)
    assert ip_block_problems(policy) == []


# --- A cluster whose own ranges are neither RFC 1918 nor all IPv4.

POD_CIDRS = ["100.64.0.0/10", "fd12:3456::/48"]
SERVICE_CIDRS = ["203.0.113.0/24", "2001:db8:1::/64"]  # public-looking
NODE_CIDRS = ["240.0.0.0/4", "198.51.100.0/24", "2001:db8:2::/64"]
EGRESS_ALLOW = ["10.20.0.0/16", "2001:db8:ffff::/48"]
NS = "tenant-a"
UNIT = dataclasses.replace(
    CONTRACT,
    namespace=NS,
    tenant="tenant-a",
    ports=[
        {"name": "http", "port": 8080, "protocol": "TCP"},
        {"name": "metrics", "port": 9100, "protocol": "TCP"},
    ],
    access={"primaryPort": "http", "scheme": "tcp"},  # published on a NodePort
)
UNIT_POD = Endpoint(
    "100.64.1.5", NS, manifests._unit_selector(UNIT), {"http": 8080, "metrics": 9100}
)
UNIT_POD_V6 = dataclasses.replace(UNIT_POD, ip="fd12:3456::1:5")


@pytest.fixture
def policies(settings, monkeypatch) -> list[dict]:
    """The tenant namespace's policy and the unit's, as provisioning builds them from the
    settings (the cluster calls faked: what they were given is what is kept)."""
    settings.CLUSTER_POD_CIDRS = POD_CIDRS
    settings.CLUSTER_SERVICE_CIDRS = SERVICE_CIDRS
    settings.CLUSTER_NODE_CIDRS = NODE_CIDRS
    settings.NETWORK_POLICIES = True
    settings.NETWORK_GATEWAY_NAMESPACE = "gateway-system"
    settings.NETWORK_EGRESS_ALLOW = EGRESS_ALLOW
    settings.TENANT_NAMESPACE_PROVISIONING = False
    settings.ACCESS_TCP_SERVICE_TYPE = "NodePort"
    built: list[dict] = []

    def keep(kind: kube.Kind, body: dict, **options: object) -> dict:
        built.append(body)
        return body

    monkeypatch.setattr(kube, "ensure", keep)
    monkeypatch.setattr(kube, "create_or_adopt", keep)
    provisioning.ensure_tenant_namespace(Tenant(slug="tenant-a", namespace=NS))
    provisioning.provision_access(UNIT, owner_uid=OWNER_UID)
    found = [body for body in built if body["kind"] == "NetworkPolicy"]
    assert {p["metadata"]["name"] for p in found} == {
        manifests.TENANT_POLICY,
        manifests.object_name(UNIT.name, manifests.Part.NETWORK_POLICY),
    }
    for policy in found:
        assert_valid(policy)
    return found


def pod(ip: str, namespace: str, **labels: str) -> Endpoint:
    return Endpoint(ip, namespace, labels or {"app": "x"})


KUBE_DNS = pod("100.64.0.10", "kube-system", **{"k8s-app": "kube-dns"})
KUBE_DNS_V6 = dataclasses.replace(KUBE_DNS, ip="fd12:3456::a")

# (destination, port, protocol, whether the unit may connect to it)
EGRESS = [
    # The internet, both families.
    (Endpoint("8.8.8.8"), 443, "TCP", True),
    (Endpoint("1.1.1.1"), 53, "UDP", True),
    (Endpoint("2606:4700::1111"), 443, "TCP", True),
    (Endpoint("2001:4860:4860::8888"), 443, "TCP", True),
    # NETWORK_EGRESS_ALLOW, both families.
    (Endpoint("10.20.5.5"), 5000, "TCP", True),
    (Endpoint("2001:db8:ffff::5"), 5000, "TCP", True),
    # DNS to kube-dns (on pod addresses of the cluster's ranges), and nothing else of it.
    (KUBE_DNS, 53, "UDP", True),
    (KUBE_DNS, 53, "TCP", True),
    (KUBE_DNS_V6, 53, "UDP", True),
    (KUBE_DNS, 443, "TCP", False),
    (pod("100.64.0.11", "kube-system"), 53, "UDP", False),
    # Other tenants' pods and the control plane's, by the cluster's pod ranges.
    (pod("100.64.2.7", "tenant-b"), 8080, "TCP", False),
    (pod("fd12:3456::2:7", "tenant-b"), 8080, "TCP", False),
    (pod("100.64.9.9", "gpu-control-plane", component="web"), 8000, "TCP", False),
    # Nodes (kubelet, node ports) and Service addresses, on public-looking ranges too.
    (Endpoint("240.0.0.5"), 10250, "TCP", False),
    (Endpoint("198.51.100.20"), 10250, "TCP", False),
    (Endpoint("198.51.100.20"), 30080, "TCP", False),
    (Endpoint("2001:db8:2::20"), 10250, "TCP", False),
    (Endpoint("203.0.113.10"), 443, "TCP", False),
    (Endpoint("2001:db8:1::10"), 443, "TCP", False),
    # Cloud metadata over IPv4 and IPv6; Alibaba's sits in shared space.
    (Endpoint("169.254.169.254"), 80, "TCP", False),
    (Endpoint("fd00:ec2::254"), 80, "TCP", False),
    (Endpoint("100.100.100.200"), 80, "TCP", False),
    # Private, shared, loopback, unique-local, link-local, multicast, reserved.
    (Endpoint("10.1.2.3"), 443, "TCP", False),
    (Endpoint("172.20.0.1"), 443, "TCP", False),
    (Endpoint("192.168.1.1"), 443, "TCP", False),
    (Endpoint("127.0.0.1"), 443, "TCP", False),
    (Endpoint("::1"), 443, "TCP", False),
    (Endpoint("fd00::1"), 443, "TCP", False),
    (Endpoint("169.254.1.1"), 443, "TCP", False),
    (Endpoint("fe80::1"), 443, "TCP", False),
    (Endpoint("224.0.0.251"), 5353, "UDP", False),
    (Endpoint("239.1.2.3"), 5000, "UDP", False),
    (Endpoint("ff02::fb"), 5353, "UDP", False),
    (Endpoint("ff05::1:3"), 547, "UDP", False),
    (Endpoint("255.255.255.255"), 67, "UDP", False),
    # NAT64 turns these into IPv4 addresses the IPv4 rule never sees: 10.0.0.1, the metadata.
    (Endpoint("64:ff9b::a00:1"), 443, "TCP", False),
    (Endpoint("64:ff9b::a9fe:a9fe"), 80, "TCP", False),
    (Endpoint("64:ff9b:1::a00:1"), 443, "TCP", False),
]


@pytest.mark.parametrize("unit_pod", [UNIT_POD, UNIT_POD_V6], ids=["ipv4-pod", "ipv6-pod"])
def test_units_reach_dns_the_internet_and_the_allow_list_but_not_the_cluster_or_reserved_ranges(
    policies, unit_pod
):
    wrong = [
        f"{destination.ip}:{port}/{protocol} should be {'allowed' if expected else 'denied'}"
        for destination, port, protocol, expected in EGRESS
        if allows(policies, unit_pod, destination, port, protocol) != expected
    ]
    assert wrong == []


# (source, port, whether it may connect to the unit, whose port 8080 is on a NodePort)
INGRESS = [
    # Clients on the internet keep their address (externalTrafficPolicy Local): port 8080 only.
    (Endpoint("8.8.8.8"), 8080, True),
    (Endpoint("2606:4700::1111"), 8080, True),
    (Endpoint("8.8.8.8"), 9100, False),
    (Endpoint("2606:4700::1111"), 9100, False),
    # The gateway's namespace, and the unit's own pods.
    (pod("100.64.3.3", "gateway-system"), 9100, True),
    # Another tenant's pod, through the node port or straight: its address is the cluster's.
    (pod("100.64.2.7", "tenant-b"), 8080, False),
    (pod("fd12:3456::2:7", "tenant-b"), 8080, False),
    (pod("100.64.2.8", NS, **{manifests.LABEL_UNIT: "sibling"}), 8080, False),
    # Nodes and Service addresses on public-looking ranges, and every reserved range.
    (Endpoint("198.51.100.20"), 8080, False),
    (Endpoint("240.0.0.5"), 8080, False),
    (Endpoint("2001:db8:2::20"), 8080, False),
    (Endpoint("203.0.113.10"), 8080, False),
    (Endpoint("2001:db8:1::10"), 8080, False),
    (Endpoint("10.1.2.3"), 8080, False),
    (Endpoint("169.254.169.254"), 8080, False),
    (Endpoint("fd00:ec2::254"), 8080, False),
    (Endpoint("fe80::1"), 8080, False),
    (Endpoint("64:ff9b::a00:1"), 8080, False),
]


def test_a_published_port_admits_the_internet_but_not_the_cluster_or_reserved_ranges(policies):
    wrong = [
        f"{source.ip} to port {port} should be {'allowed' if expected else 'denied'}"
        for source, port, expected in INGRESS
        if allows(policies, source, UNIT_POD, port) != expected
    ]
    assert wrong == []


def test_every_internet_rule_is_one_block_per_family_excepting_the_cluster_ranges(policies):
    blocks = [
        peer["ipBlock"]
        for policy in policies
        for rule in [*policy["spec"].get("ingress", []), *policy["spec"].get("egress", [])]
        for peer in rule.get("from", rule.get("to", []))
        if "ipBlock" in peer and "except" in peer["ipBlock"]
    ]
    assert [block["cidr"] for block in blocks] == ["0.0.0.0/0", "::/0"] * 2
    for block in blocks:
        family = ipaddress.ip_network(block["cidr"]).version
        cluster = [
            cidr
            for cidr in POD_CIDRS + SERVICE_CIDRS + NODE_CIDRS
            if ipaddress.ip_network(cidr).version == family
        ]
        assert set(cluster) <= set(block["except"])
        assert len(block["except"]) == len(set(block["except"]))  # each range named once
