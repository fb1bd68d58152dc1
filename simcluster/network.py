"""What the API server and the cloud give Services and Ingresses: cluster IPs from the service
CIDR, node ports from the node-port range, load-balancer addresses from a simulated pool."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

from simcluster.errors import ApiError, cause
from simcluster.gateway import StoreObjects
from simcluster.gatewayapi import (
    GATEWAY_CLASSES,
    GATEWAY_CONTROLLER,
    GATEWAY_GROUP,
    GATEWAYS,
    HTTP_ROUTES,
    route_conditions,
)
from simcluster.store import now_rfc3339
from simcluster.validation import go_value

if TYPE_CHECKING:
    from simcluster.store import Store

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
NODE_PORTS = range(30000, 32768)
# TEST-NET-1 (RFC 5737): addresses the simulated load balancers and ingress controller hand out.
LOAD_BALANCER_POOL = ipaddress.ip_network("192.0.2.0/24")
# The simulated ingress controller's own address: every Ingress it serves reports it.
INGRESS_ADDRESS = str(LOAD_BALANCER_POOL[1])
# The first addresses of the range belong to `kubernetes` (.1) and kube-dns (.10).
_FIRST_DYNAMIC_IP = 11
_NODE_PORT_TYPES = ("NodePort", "LoadBalancer")


class NetworkAllocator:
    """Allocations kept as an index over the stored Services (rebuilt from the store at install,
    moved by every Service write), so an allocation costs no scan of all Services."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._ips: dict[str, str] = {}  # cluster IP -> service uid
        self._ports: dict[int, str] = {}  # node port -> service uid
        self._balancers: dict[str, str] = {}  # load-balancer IP -> service uid
        self._held: dict[str, tuple[set[str], set[int], set[str]]] = {}
        self._next_ip = _FIRST_DYNAMIC_IP
        self._next_port = NODE_PORTS.start
        self._next_balancer = 2

    def install(self) -> None:
        with self.store.lock:
            for service in self.store.list_shared("services")[0]:
                self._index(service)
        self.store.add_mutation(self.mutate)
        self.store.add_listener(self._on_change)

    # -- index ------------------------------------------------------------------------------

    def _index(self, service: dict[str, Any]) -> None:
        uid = service["metadata"]["uid"]
        self._release(uid)
        ips, ports, balancers = _held(service)
        for ip in ips:
            self._ips[ip] = uid
        for port in ports:
            self._ports[port] = uid
        for ip in balancers:
            self._balancers[ip] = uid
        self._held[uid] = (ips, ports, balancers)

    def _release(self, uid: str) -> None:
        ips, ports, balancers = self._held.pop(uid, (set(), set(), set()))
        for ip in ips:
            if self._ips.get(ip) == uid:
                del self._ips[ip]
        for port in ports:
            if self._ports.get(port) == uid:
                del self._ports[port]
        for ip in balancers:
            if self._balancers.get(ip) == uid:
                del self._balancers[ip]

    def _on_change(self, event_type: str, resource: str, obj: dict[str, Any]) -> None:
        if resource != "services":
            return
        if event_type == "DELETED":
            self._release(obj["metadata"]["uid"])
        else:
            self._index(obj)

    # -- allocation -------------------------------------------------------------------------

    def mutate(
        self, operation: str, resource: str, new: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        if resource == "services":
            self._allocate_service(new, old)
        elif resource == "ingresses" and operation == "CREATE":
            new["status"] = {"loadBalancer": {"ingress": [{"ip": INGRESS_ADDRESS}]}}
        elif resource in (GATEWAY_CLASSES, GATEWAYS, HTTP_ROUTES):
            self._gateway_status(resource, new)

    def _gateway_status(self, resource: str, obj: dict[str, Any]) -> None:
        """Accepted/Programmed as a Gateway implementation reports them, for the objects of
        classes naming GATEWAY_CONTROLLER; other controllers' objects are left alone."""
        spec = obj.get("spec") or {}
        generation = obj["metadata"].get("generation", 1)
        now = obj["metadata"].get("creationTimestamp") or now_rfc3339()
        if resource == GATEWAY_CLASSES:
            if spec.get("controllerName") == GATEWAY_CONTROLLER:
                obj["status"] = {"conditions": [_accepted(generation, now)]}
            return
        if resource == GATEWAYS:
            if not self._ours(spec.get("gatewayClassName")):
                return
            obj["status"] = {
                "addresses": [{"type": "IPAddress", "value": INGRESS_ADDRESS}],
                "conditions": [
                    _accepted(generation, now),
                    _condition("Programmed", "Programmed", generation, now),
                ],
                "listeners": [
                    {
                        "name": listener.get("name", ""),
                        "attachedRoutes": 0,
                        "supportedKinds": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute"}],
                        "conditions": [
                            _accepted(generation, now),
                            _condition("Programmed", "Programmed", generation, now),
                            _condition("ResolvedRefs", "ResolvedRefs", generation, now),
                        ],
                    }
                    for listener in spec.get("listeners") or []
                ],
            }
            return
        parents = []
        resolved, message = route_conditions(StoreObjects(self.store), obj)["ResolvedRefs"]
        for ref in spec.get("parentRefs") or []:
            namespace = ref.get("namespace") or obj["metadata"].get("namespace")
            gateway = self.store.get_shared(GATEWAYS, namespace, ref.get("name", ""))
            if gateway is None or not self._ours(
                (gateway.get("spec") or {}).get("gatewayClassName")
            ):
                continue
            parents.append(
                {
                    "parentRef": {"group": GATEWAY_GROUP, "kind": "Gateway", **ref},
                    "controllerName": GATEWAY_CONTROLLER,
                    "conditions": [
                        _accepted(generation, now),
                        _condition("ResolvedRefs", resolved, generation, now, message=message),
                    ],
                }
            )
        if parents:
            obj["status"] = {"parents": parents}

    def _ours(self, class_name: str | None) -> bool:
        gateway_class = self.store.get_shared(GATEWAY_CLASSES, None, class_name or "")
        return (gateway_class or {}).get("spec", {}).get("controllerName") == GATEWAY_CONTROLLER

    def _allocate_service(self, service: dict[str, Any], old: dict[str, Any] | None) -> None:
        spec = service.setdefault("spec", {})
        uid = service["metadata"].get("uid", "")
        name = service["metadata"].get("name", "")
        kind_type = spec.get("type", "ClusterIP")
        causes: list[dict[str, str]] = []
        if kind_type == "ExternalName":
            return
        old_spec = (old or {}).get("spec") or {}
        if old is not None and old_spec.get("clusterIP") and old_spec.get("type") != "ExternalName":
            wanted = spec.get("clusterIP")
            if wanted != old_spec["clusterIP"]:
                causes.append(
                    cause(
                        "FieldValueInvalid",
                        "spec.clusterIPs[0]",
                        f"Invalid value: {go_value(wanted)}: may not change once set",
                    )
                )
        elif spec.get("clusterIP") == "None" or (spec.get("clusterIPs") or [None])[0] == "None":
            spec["clusterIP"], spec["clusterIPs"] = "None", ["None"]
        else:
            wanted = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
            if wanted:
                problem = self._check_ip(wanted, uid)
                if problem:
                    causes.append(
                        cause(
                            "FieldValueInvalid",
                            "spec.clusterIPs",
                            f'Invalid value: ["{wanted}"]: failed to allocate IP {wanted}: '
                            f"{problem}",
                        )
                    )
            else:
                wanted = self._free_ip()
            spec["clusterIP"], spec["clusterIPs"] = wanted, [wanted]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if kind_type in _NODE_PORT_TYPES:
            causes += self._allocate_node_ports(spec, uid)
        if causes:
            raise ApiError.invalid("Service", name, causes)
        if kind_type == "LoadBalancer":
            status = service.setdefault("status", {})
            ingress = (status.get("loadBalancer") or {}).get("ingress") or []
            address = "" if ingress else self._free_balancer()
            if address:
                status["loadBalancer"] = {"ingress": [{"ip": address, "ipMode": "VIP"}]}
        elif (service.get("status") or {}).get("loadBalancer", {}).get("ingress"):
            service["status"] = {"loadBalancer": {}}

    def _allocate_node_ports(self, spec: dict[str, Any], uid: str) -> list[dict[str, str]]:
        causes = []
        taken_here: set[int] = set()
        for index, port in enumerate(spec.get("ports") or []):
            node_port = port.get("nodePort")
            if not node_port:
                continue
            where = f"spec.ports[{index}].nodePort"
            if node_port not in NODE_PORTS:
                causes.append(
                    cause(
                        "FieldValueInvalid",
                        where,
                        f"Invalid value: {node_port}: provided port is not in the valid range. "
                        f"The range of valid ports is {NODE_PORTS.start}-{NODE_PORTS.stop - 1}",
                    )
                )
            elif self._ports.get(node_port, uid) != uid or node_port in taken_here:
                causes.append(
                    cause(
                        "FieldValueInvalid",
                        where,
                        f"Invalid value: {node_port}: provided port is already allocated",
                    )
                )
            taken_here.add(node_port)
        if causes:
            return causes
        for port in spec.get("ports") or []:
            if not port.get("nodePort"):
                port["nodePort"] = self._free_port(taken_here)
                taken_here.add(port["nodePort"])
        return []

    def _check_ip(self, wanted: str, uid: str) -> str | None:
        try:
            address = ipaddress.ip_address(wanted)
        except ValueError:
            return f"the provided IP ({wanted}) is not a valid IP address"
        if address not in SERVICE_CIDR:
            return (
                f"the provided IP ({wanted}) is not in the valid range. The range of valid IPs "
                f"is {SERVICE_CIDR}"
            )
        if self._ips.get(wanted, uid) != uid:
            return "provided IP is already allocated"
        return None

    def _free_ip(self) -> str:
        size = SERVICE_CIDR.num_addresses - 2
        for _ in range(size):
            candidate = str(SERVICE_CIDR[self._next_ip])
            self._next_ip = self._next_ip + 1 if self._next_ip < size else _FIRST_DYNAMIC_IP
            if candidate not in self._ips:
                return candidate
        raise ApiError.internal("failed to allocate a serviceIP: range is full")

    def _free_port(self, taken_here: set[int]) -> int:
        for _ in NODE_PORTS:
            candidate = self._next_port
            self._next_port = candidate + 1 if candidate + 1 in NODE_PORTS else NODE_PORTS.start
            if candidate not in self._ports and candidate not in taken_here:
                return candidate
        raise ApiError.internal("failed to allocate a nodePort: range is full")

    def _free_balancer(self) -> str:
        size = LOAD_BALANCER_POOL.num_addresses - 2
        for _ in range(size):
            candidate = str(LOAD_BALANCER_POOL[self._next_balancer])
            self._next_balancer = self._next_balancer + 1 if self._next_balancer < size else 2
            if candidate not in self._balancers:
                return candidate
        # An exhausted pool leaves the Service pending, as a cloud out of addresses does.
        return ""


def _condition(
    kind: str, reason: str, generation: int, now: str, *, message: str = ""
) -> dict[str, Any]:
    """A condition, True when its reason is its type (Accepted/Accepted), else False."""
    return {
        "type": kind,
        "status": "True" if reason == kind else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": now,
    }


def _accepted(generation: int, now: str) -> dict[str, Any]:
    return _condition("Accepted", "Accepted", generation, now)


def _held(service: dict[str, Any]) -> tuple[set[str], set[int], set[str]]:
    spec = service.get("spec") or {}
    ips = {ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip and ip != "None"}
    ports = {p["nodePort"] for p in spec.get("ports") or [] if p.get("nodePort")}
    balancers = {
        entry["ip"]
        for entry in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        if entry.get("ip")
    }
    return ips, ports, balancers
