"""How a unit is reached (docs/architecture.md §11): its public hostnames, the URL and
endpoints its JSON and GPUUnit status show, and which port is exposed how.

Exposure follows the unit's `access`: the primary port is published (HTTP and HTTPS through
the configured Gateway API Gateway or Ingress class under ACCESS_DOMAIN; TCP on a NodePort or
LoadBalancer Service), every other port is reachable inside the cluster through the unit's
Service `unit-<name>`. Without a gateway or ingress class an HTTP unit has only its
in-cluster URL, as the seed runtime did. Everything but `from_settings` is pure."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core import checks

from controlplane.validation import dns_label, dns_subdomain
from runtime import manifests

_LABEL_MAX = 63
# The hash is what keeps a tenant from crafting a name whose label another tenant's unit has
# (a second preimage): for a long name the readable part is a prefix anyone can copy (the cut
# drops what differs), so each name tried matches a given label with chance 2^-(5 x chars).
# 13 base32 characters, 65 bits: more than 2^60 tries even against 32 labels of one prefix
# at once. (A birthday collision between two names of one's own takes no one else's URL, and
# an order never takes a label a live unit holds: orders.create_unit.) Rows ordered before
# had 6 characters, and keep them: GPUUnit.host_label.
_HASH_CHARS = 13


@dataclass(frozen=True)
class AccessConfig:
    """The platform's exposure settings (ACCESS_* in settings)."""

    domain: str = ""  # public DNS zone for unit hostnames, e.g. units.gpu.example.com
    gateway: str = ""  # "<namespace>/<name>" of a Gateway API Gateway, or ""
    ingress_class: str = ""  # an IngressClass, used when no gateway is set
    public_scheme: str = "https"  # what the gateway or ingress serves clients
    tcp_service_type: str = "NodePort"  # NodePort or LoadBalancer for tcp access; ClusterIP
    tcp_host: str = ""  # the address clients use for NodePorts (a node, or a proxy in front)

    @property
    def http_exposed(self) -> bool:
        return bool(self.domain and (self.gateway or self.ingress_class))

    @property
    def gateway_ref(self) -> tuple[str, str]:
        namespace, _, name = self.gateway.partition("/")
        return namespace, name


def from_settings() -> AccessConfig:
    """The platform's exposure settings, read when asked (tests override them)."""
    return AccessConfig(
        domain=settings.ACCESS_DOMAIN,
        gateway=settings.ACCESS_GATEWAY,
        ingress_class=settings.ACCESS_INGRESS_CLASS,
        public_scheme=settings.ACCESS_PUBLIC_SCHEME,
        tcp_service_type=settings.ACCESS_TCP_SERVICE_TYPE,
        tcp_host=settings.ACCESS_TCP_HOST,
    )


def service_name(unit: str) -> str:
    return manifests.object_name(unit, manifests.Part.SERVICE)


def _short_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return base64.b32encode(digest).decode().lower()[:_HASH_CHARS]


def host_label(namespace: str, unit: str, candidate: int = 0) -> str:
    """One DNS label naming the unit across tenants: `<unit>-<namespace>-<hash>` (the tenant's
    namespace, on every unit row: no lookup of the tenant to render a unit), each part cut
    so the label fits 63 characters, runs of '-' folded (a label with '--' at its third
    character is reserved for IDNA), the hash of tenant and unit keeping it unique where the
    cut or the folding would make two units look alike. `candidate` n > 0 hashes
    "<namespace>/<unit>#n" instead: the next label an order tries when a live unit holds
    this one (orders.create_unit), which the unit then keeps (GPUUnit.host_label)."""
    room = _LABEL_MAX - _HASH_CHARS - 2  # two '-' join the three parts
    namespace_part = namespace[: max(room - len(unit), min(len(namespace), 12))]
    unit_part = unit[: room - len(namespace_part)]
    parts = [re.sub("-+", "-", part).strip("-") for part in (unit_part, namespace_part)]
    hashed = f"{namespace}/{unit}#{candidate}" if candidate else f"{namespace}/{unit}"
    return "-".join([*(part for part in parts if part), _short_hash(hashed)])


def hostname(namespace: str, unit: str, domain: str, label: str = "") -> str:
    """The unit's public hostname: its stored label (GPUUnit.host_label), or for a row that
    has none the label computed from its names."""
    return f"{label or host_label(namespace, unit)}.{domain}"


def in_cluster_url(scheme: str, unit: str, namespace: str, port: int) -> str:
    return f"{scheme}://{service_name(unit)}.{namespace}.svc.cluster.local:{port}"


def primary_port(ports: list[dict], access: dict) -> dict | None:
    name = access.get("primaryPort")
    return next((port for port in ports if port["name"] == name), None)


def for_unit(unit: object, config: AccessConfig | None = None) -> dict:
    """What a unit row shows under `access` (unit JSON, GPUUnit status): its settings and
    `url`/`endpoints`, from its template's ports and what provisioning saw of its Service."""
    settings_ = getattr(unit, "access", None) or {}
    ports = (getattr(unit, "template", None) or {}).get("ports") or []
    if not ports:
        return {"url": None, "endpoints": []}  # most units: nothing to read settings for
    exposed = getattr(unit, "exposed", None) or {}
    shown = describe(
        unit=unit.name,  # type: ignore[attr-defined]
        namespace=unit.namespace,  # type: ignore[attr-defined]
        ports=ports,
        access=settings_,
        config=config or from_settings(),
        node_ports=exposed.get("nodePorts"),
        load_balancer=exposed.get("loadBalancer", ""),
        label=getattr(unit, "host_label", ""),
    )
    return {**settings_, **shown}


def ssh_for_unit(unit: object, config: AccessConfig | None = None) -> dict:
    """`ssh` on the unit JSON: {enabled, keys, username, host, port, command}; the port and
    command are null until the unit's ssh Service has its node port."""
    ssh = getattr(unit, "ssh", None) or {}
    if not ssh.get("enabled"):
        return {"enabled": False}
    config = config or from_settings()
    port = (getattr(unit, "exposed", None) or {}).get("sshNodePort")
    host = config.tcp_host or None
    command = f"ssh -p {port} {settings.SSH_USERNAME}@{host}" if port and host else None
    return {
        "enabled": True,
        "keys": list(ssh.get("keys") or []),
        "username": settings.SSH_USERNAME,
        "host": host,
        "port": port,
        "command": command,
    }


def tcp_exposed(access: dict, config: AccessConfig) -> bool:
    return access.get("scheme") == "tcp" and config.tcp_service_type in (
        "NodePort",
        "LoadBalancer",
    )


@dataclass(frozen=True)
class Exposure:
    """What a unit's Services hold of its tenant's allowances, counted as the ResourceQuota
    counts them: `services.nodeports` every port of a NodePort or LoadBalancer Service,
    `services.loadbalancers` each LoadBalancer Service."""

    node_ports: int = 0
    load_balancers: int = 0

    def __add__(self, other: Exposure) -> Exposure:
        return Exposure(
            self.node_ports + other.node_ports, self.load_balancers + other.load_balancers
        )


def exposure(*, ports: list[dict], access: dict, ssh: bool, config: AccessConfig) -> Exposure:
    """The Services provisioning makes for a unit (runtime/control/provisioning.CHILDREN)
    and what they hold: the unit's Service takes a node port for each template port when its
    tcp access is exposed; the SSH Service one, unless SSH stays in the cluster."""
    balanced = int(config.tcp_service_type == "LoadBalancer")
    held = Exposure()
    if ports and tcp_exposed(access, config):
        held += Exposure(len(ports), balanced)
    if ssh and config.tcp_service_type != "ClusterIP":
        held += Exposure(1, balanced)
    return held


def spec_exposure(spec: Mapping[str, Any], config: AccessConfig) -> Exposure:
    """`exposure` of a unit's `template`, `access` and `ssh` as its row keeps them."""
    return exposure(
        ports=(spec.get("template") or {}).get("ports") or [],
        access=spec.get("access") or {},
        ssh=bool((spec.get("ssh") or {}).get("enabled")),
        config=config,
    )


def describe(
    *,
    unit: str,
    namespace: str,
    ports: list[dict],
    access: dict,
    config: AccessConfig,
    node_ports: dict[str, int] | None = None,
    load_balancer: str = "",
    label: str = "",
) -> dict:
    """`{url, endpoints[{name, port, protocol, url}]}` for the unit JSON and GPUUnit status,
    the public URL under the unit's stored host `label` (computed when it has none). A TCP
    endpoint's URL is null until its Service has its node port (or address)."""
    if not ports:
        return {"url": None, "endpoints": []}
    primary = primary_port(ports, access)
    endpoints = []
    for port in ports:
        protocol = port.get("protocol", "TCP")
        scheme = access.get("scheme", "http") if port is primary else protocol.lower()
        url: str | None = in_cluster_url(scheme, unit, namespace, port["port"])
        if port is primary and scheme in ("http", "https") and config.http_exposed:
            url = f"{config.public_scheme}://{hostname(namespace, unit, config.domain, label)}"
        elif port is primary and tcp_exposed(access, config):
            url = None
            if config.tcp_service_type == "LoadBalancer" and load_balancer:
                url = f"tcp://{load_balancer}:{port['port']}"
            elif (node_ports or {}).get(port["name"]) and config.tcp_host:
                url = f"tcp://{config.tcp_host}:{node_ports[port['name']]}"  # type: ignore[index]
        endpoints.append(
            {"name": port["name"], "port": port["port"], "protocol": protocol, "url": url}
        )
    url = endpoints[ports.index(primary)]["url"] if primary is not None else None
    return {"url": url, "endpoints": endpoints}


def check_settings(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """System check: the ACCESS_* settings can make valid objects and hostnames."""
    errors: list[checks.CheckMessage] = []
    config = from_settings()

    def error(message: str, number: int) -> None:
        errors.append(checks.Error(message, id=f"runtime.E1{number:02d}"))

    if config.tcp_service_type not in ("NodePort", "LoadBalancer", "ClusterIP"):
        error("ACCESS_TCP_SERVICE_TYPE must be NodePort, LoadBalancer or ClusterIP.", 1)
    namespace, _, name = config.gateway.partition("/")
    if config.gateway and (dns_label(namespace) or dns_subdomain(name)):
        error('ACCESS_GATEWAY must be "<namespace>/<name>" of a Gateway.', 2)
    if config.domain and (dns_subdomain(config.domain) or len(config.domain) > 253 - 64):
        error("ACCESS_DOMAIN must be a DNS name short enough for a 63-character label.", 3)
    if config.public_scheme not in ("http", "https"):
        error("ACCESS_PUBLIC_SCHEME must be http or https.", 4)
    return errors
