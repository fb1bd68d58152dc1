"""Gateway API routing as the development gateway applies it (pure: objects in, decision out):
which HTTP listener a Host reaches, which HTTPRoute rule wins, and where its backendRef leads
(Service, ready pod, target port), by the rules of the HTTPRoute spec and its conformance
tests (kubernetes-sigs/gateway-api: hostname intersection, match precedence, ReferenceGrant,
404 for no route, 500 for an invalid backendRef, 503 for a Service without ready endpoints).
Filters are not applied."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

GATEWAY_CONTROLLER = "devstack.lokiwager.io/gateway-controller"
GATEWAY_GROUP = "gateway.networking.k8s.io"
GATEWAY_CLASSES = f"gatewayclasses.{GATEWAY_GROUP}"
GATEWAYS = f"gateways.{GATEWAY_GROUP}"
HTTP_ROUTES = f"httproutes.{GATEWAY_GROUP}"
REFERENCE_GRANTS = f"referencegrants.{GATEWAY_GROUP}"

Obj = Mapping[str, Any]


class Objects(Protocol):
    """The cluster objects routing reads: a store's, or plain ones in tests. A resource the
    cluster does not serve (the ReferenceGrant CRD not installed) lists as empty."""

    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None: ...

    def list(self, resource: str, namespace: str | None = None) -> Sequence[Obj]: ...


class ObjectSet:
    """`Objects` over plain manifests, keyed by resource (pure tests, one-off checks)."""

    def __init__(self, objects: Iterable[tuple[str, Obj]]) -> None:
        self._objects: dict[str, list[Obj]] = {}
        for resource, obj in objects:
            self._objects.setdefault(resource, []).append(obj)

    def get(self, resource: str, namespace: str | None, name: str) -> Obj | None:
        return next(
            (
                obj
                for obj in self._objects.get(resource, [])
                if _name(obj) == name and _namespace(obj) == (namespace or "")
            ),
            None,
        )

    def list(self, resource: str, namespace: str | None = None) -> Sequence[Obj]:
        return [
            obj
            for obj in self._objects.get(resource, [])
            if namespace is None or _namespace(obj) == namespace
        ]


# -- hostnames --------------------------------------------------------------------------------


def request_host(header: str) -> str:
    """The Host header as routes match it: lower case, the port ignored (the spec: "MUST
    ignore any port value specified in the HTTP Host header")."""
    host = header.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def hostname_matches(pattern: str | None, host: str) -> bool:
    """A listener's or route's hostname against a request's host: no hostname matches all,
    `*.example.com` is a suffix match of one or more labels (not `example.com` itself)."""
    if not pattern:
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def intersect(listener: str | None, route: str) -> str | None:
    """The hostname a route's `route` entry serves on a listener of hostname `listener`, or
    None where they do not intersect (the spec's examples: `*.specific.com` on listener
    `very.specific.com` serves `very.specific.com`; `wildcard.io` on `*.wildcard.io` none;
    of two wildcards the narrower)."""
    if not listener:
        return route
    if not route.startswith("*."):
        return route if hostname_matches(listener, route) else None
    if not listener.startswith("*."):
        return listener if hostname_matches(route, listener) else None
    if route[1:].endswith(listener[1:]):
        return route
    if listener[1:].endswith(route[1:]):
        return listener
    return None


def _hostname_rank(hostname: str | None) -> tuple[int, int]:
    """Precedence among matching hostnames: characters of a non-wildcard one, then characters."""
    if not hostname:
        return (0, 0)
    return (0 if hostname.startswith("*.") else len(hostname), len(hostname))


# -- listeners and attachment -----------------------------------------------------------------


@dataclass(frozen=True)
class Listener:
    gateway: Obj
    spec: Obj

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def hostname(self) -> str | None:
        return self.spec.get("hostname") or None

    @property
    def label(self) -> str:
        return f"Gateway {_namespace(self.gateway)}/{_name(self.gateway)}, listener {self.name}"


def http_listeners(objects: Objects, port: int) -> list[Listener]:
    """The HTTP listeners on `port` of every Gateway whose class names the development
    controller (they share one address, as the Gateways' status says), oldest Gateway first."""
    ours = {
        _name(gateway_class)
        for gateway_class in objects.list(GATEWAY_CLASSES)
        if (gateway_class.get("spec") or {}).get("controllerName") == GATEWAY_CONTROLLER
    }
    gateways = sorted(
        (
            g
            for g in objects.list(GATEWAYS)
            if (g.get("spec") or {}).get("gatewayClassName") in ours
        ),
        key=_age_key,
    )
    return [
        Listener(gateway, listener)
        for gateway in gateways
        for listener in (gateway.get("spec") or {}).get("listeners") or []
        if listener.get("protocol") == "HTTP" and listener.get("port") == port
    ]


def select_listeners(listeners: Sequence[Listener], host: str) -> list[Listener]:
    """The listeners a request for `host` reaches: those of the most specific hostname that
    matches it (exact, then the longest wildcard, then none), as a gateway picks its virtual
    host."""
    matching = [listener for listener in listeners if hostname_matches(listener.hostname, host)]
    if not matching:
        return []
    best = max(_listener_rank(listener.hostname) for listener in matching)
    return [listener for listener in matching if _listener_rank(listener.hostname) == best]


def _listener_rank(hostname: str | None) -> tuple[int, int]:
    if not hostname:
        return (0, 0)
    return (1 if hostname.startswith("*.") else 2, len(hostname))


def attaches(objects: Objects, route: Obj, listener: Listener) -> bool:
    """Whether one of the route's parentRefs names this listener (its Gateway, and its name
    and port when given) and the listener allows the route (namespaces, kinds)."""
    route_namespace = _namespace(route)
    gateway = listener.gateway
    named = False
    for ref in (route.get("spec") or {}).get("parentRefs") or []:
        if (ref.get("group") or GATEWAY_GROUP) != GATEWAY_GROUP:
            continue
        if (ref.get("kind") or "Gateway") != "Gateway":
            continue
        if ref.get("name") != _name(gateway):
            continue
        if (ref.get("namespace") or route_namespace) != _namespace(gateway):
            continue
        if ref.get("sectionName") and ref["sectionName"] != listener.name:
            continue
        if ref.get("port") and ref["port"] != listener.spec.get("port"):
            continue
        named = True
        break
    return named and _allows(objects, listener, route_namespace)


def _allows(objects: Objects, listener: Listener, route_namespace: str) -> bool:
    allowed = listener.spec.get("allowedRoutes") or {}
    kinds = allowed.get("kinds") or []
    if kinds and not any(
        kind.get("kind") == "HTTPRoute" and (kind.get("group") or GATEWAY_GROUP) == GATEWAY_GROUP
        for kind in kinds
    ):
        return False
    namespaces = allowed.get("namespaces") or {}
    source = namespaces.get("from") or "Same"
    if source == "All":
        return True
    if source == "Same":
        return route_namespace == _namespace(listener.gateway)
    if source == "Selector":
        namespace = objects.get("namespaces", None, route_namespace)
        labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
        return selector_matches(namespaces.get("selector") or {}, labels)
    return False


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1 LabelSelector (matchLabels and matchExpressions) against labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key", ""), expression.get("operator")
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def route_hostnames(route: Obj, listener: Listener) -> list[str | None]:
    """The hostnames a route serves on a listener: its own intersected with the listener's
    (none of its own: the listener's, or every host)."""
    own = (route.get("spec") or {}).get("hostnames") or []
    if not own:
        return [listener.hostname]
    served = [intersect(listener.hostname, hostname.lower()) for hostname in own]
    return [hostname for hostname in served if hostname is not None]


# -- matches ----------------------------------------------------------------------------------

DEFAULT_MATCH: Mapping[str, Any] = {"path": {"type": "PathPrefix", "value": "/"}}


@dataclass(frozen=True)
class Request:
    host: str  # as request_host gives it
    path: str  # without the query
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    query: Mapping[str, str] = field(default_factory=dict)


def path_matches(match: Mapping[str, Any], path: str) -> bool:
    """Exact: the whole path, case-sensitive. PathPrefix: element by element, a trailing `/`
    ignored (`/abc` matches `/abc`, `/abc/`, `/abc/def`, not `/abcd`). RegularExpression: the
    whole path (Python's dialect; the spec leaves the dialect to the implementation)."""
    kind = match.get("type") or "PathPrefix"
    value = match.get("value") or "/"
    if kind == "Exact":
        return path == value
    if kind == "RegularExpression":
        try:
            return re.fullmatch(value, path) is not None
        except re.error:
            return False
    prefix = value.rstrip("/")
    return path == prefix or path.startswith(prefix + "/") or not prefix


def request_matches(match: Mapping[str, Any], request: Request) -> bool:
    if not path_matches(match.get("path") or DEFAULT_MATCH["path"], request.path):
        return False
    if match.get("method") and match["method"] != request.method:
        return False
    for header in match.get("headers") or []:
        if not _value_matches(header, request.headers.get(header.get("name", "").lower())):
            return False
    for param in match.get("queryParams") or []:
        if not _value_matches(param, request.query.get(param.get("name", ""))):
            return False
    return True


def _value_matches(matcher: Mapping[str, Any], actual: str | None) -> bool:
    if actual is None:
        return False
    if matcher.get("type") == "RegularExpression":
        try:
            return re.search(matcher.get("value", ""), actual) is not None
        except re.error:
            return False
    return actual == matcher.get("value")


def match_rank(match: Mapping[str, Any]) -> tuple[int, int, int, int, int]:
    """The spec's precedence: an Exact path, then the longest PathPrefix, then a method, then
    the most header matches, then the most query param matches (a regular expression path
    after both: its precedence is implementation-specific)."""
    path = match.get("path") or DEFAULT_MATCH["path"]
    kind = path.get("type") or "PathPrefix"
    rank = {"Exact": 2, "PathPrefix": 1}.get(kind, 0)
    return (
        rank,
        len(path.get("value") or "/") if kind == "PathPrefix" else 0,
        1 if match.get("method") else 0,
        len(match.get("headers") or []),
        len(match.get("queryParams") or []),
    )


# -- the decision -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What the gateway answers: a status, why (`reason`, one word), a sentence, and the
    objects it went through, named, in order."""

    status: int
    reason: str
    summary: str
    reached: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Backend:
    """A backendRef resolved to a Service port, or the reason it is invalid."""

    service: Obj | None
    port: Obj | None
    problem: tuple[str, str] | None  # (ResolvedRefs reason, message)

    @property
    def label(self) -> str:
        return f"Service {_namespace(self.service or {})}/{_name(self.service or {})}"


def resolve_backend(objects: Objects, route: Obj, ref: Mapping[str, Any]) -> Backend:
    """A backendRef as the spec reads it: a core Service (else InvalidKind), in the route's
    namespace or another one that grants it with a ReferenceGrant (else RefNotPermitted),
    existing, with the port the ref names (else BackendNotFound)."""
    group, kind = ref.get("group") or "", ref.get("kind") or "Service"
    name, namespace = ref.get("name", ""), ref.get("namespace") or _namespace(route)
    if group != "" or kind != "Service":
        return Backend(None, None, ("InvalidKind", f"{kind}.{group or 'core'} is not supported"))
    if namespace != _namespace(route) and not granted(objects, route, namespace, name):
        return Backend(
            None,
            None,
            (
                "RefNotPermitted",
                f"backendRef to Service {namespace}/{name} is not permitted by any "
                f"ReferenceGrant in namespace {namespace}",
            ),
        )
    service = objects.get("services", namespace, name)
    if service is None:
        return Backend(None, None, ("BackendNotFound", f"Service {namespace}/{name} not found"))
    number = ref.get("port")
    port = next(
        (p for p in (service.get("spec") or {}).get("ports") or [] if p.get("port") == number),
        None,
    )
    if port is None:
        return Backend(
            service,
            None,
            (
                "BackendNotFound",
                f"Service {namespace}/{name} has no port {number}"
                if number
                else f"backendRef to Service {namespace}/{name} names no port",
            ),
        )
    return Backend(service, port, None)


def granted(objects: Objects, route: Obj, namespace: str, name: str) -> bool:
    """Whether a ReferenceGrant in `namespace` lets HTTPRoutes of the route's namespace refer
    to its Service `name` (no name in `to`: every Service)."""
    for grant in objects.list(REFERENCE_GRANTS, namespace):
        spec = grant.get("spec") or {}
        source = any(
            entry.get("group") == GATEWAY_GROUP
            and entry.get("kind") == "HTTPRoute"
            and entry.get("namespace") == _namespace(route)
            for entry in spec.get("from") or []
        )
        target = any(
            (entry.get("group") or "") == ""
            and entry.get("kind") == "Service"
            and entry.get("name") in (None, "", name)
            for entry in spec.get("to") or []
        )
        if source and target:
            return True
    return False


@dataclass(frozen=True)
class Endpoint:
    pod: Obj
    port: int


def ready_endpoints(objects: Objects, service: Obj, service_port: Obj) -> list[Endpoint]:
    """The pods the Service selects that are Running, Ready and not terminating, each with
    the container port its targetPort names (a pod without that named port is no endpoint),
    as the EndpointSlice controller lists them."""
    selector = (service.get("spec") or {}).get("selector") or {}
    if not selector:
        return []  # a Service without a selector has only the EndpointSlices someone writes
    target = service_port.get("targetPort", service_port.get("port"))
    endpoints = []
    for pod in sorted(objects.list("pods", _namespace(service)), key=_name):
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if any(labels.get(key) != value for key, value in selector.items()):
            continue
        if not is_ready(pod):
            continue
        number = _container_port(pod, target)
        if number is not None:
            endpoints.append(Endpoint(pod, number))
    return endpoints


def selected_pods(objects: Objects, service: Obj) -> list[Obj]:
    selector = (service.get("spec") or {}).get("selector") or {}
    if not selector:
        return []
    return [
        pod
        for pod in sorted(objects.list("pods", _namespace(service)), key=_name)
        if all(
            ((pod.get("metadata") or {}).get("labels") or {}).get(key) == value
            for key, value in selector.items()
        )
    ]


def is_ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp") or not status.get("podIP"):
        return False
    if status.get("phase") != "Running":
        return False
    return any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in status.get("conditions") or []
    )


def _container_port(pod: Obj, target: Any) -> int | None:
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target:
                return int(port["containerPort"])
    return None


@dataclass(frozen=True)
class Candidate:
    route: Obj
    listener: Listener
    rule_index: int
    key: tuple[Any, ...]


def choose_rule(
    objects: Objects, listeners: Sequence[Listener], request: Request
) -> Candidate | None:
    """The winning rule over every route attached to the reached listeners: the route's most
    specific matching hostname, then the match's precedence, then the oldest route, then
    `namespace/name`, then the first rule and match in order."""
    best: Candidate | None = None
    for route in objects.list(HTTP_ROUTES):
        for listener in listeners:
            if not attaches(objects, route, listener):
                continue
            hostnames = [
                hostname
                for hostname in route_hostnames(route, listener)
                if hostname_matches(hostname, request.host)
            ]
            if not hostnames:
                continue
            host_rank = max(_hostname_rank(hostname) for hostname in hostnames)
            rules = (route.get("spec") or {}).get("rules") or [{}]
            for rule_index, rule in enumerate(rules):
                for match_index, match in enumerate(rule.get("matches") or [DEFAULT_MATCH]):
                    if not request_matches(match, request):
                        continue
                    # Larger is better for the first two; smaller for the rest.
                    key = (
                        tuple(-n for n in host_rank),
                        tuple(-n for n in match_rank(match)),
                        _age_key(route),
                        rule_index,
                        match_index,
                    )
                    if best is None or key < best.key:
                        best = Candidate(route, listener, rule_index, key)
    return best


def decide(objects: Objects, *, port: int, request: Request, turn: int = 0) -> Decision:
    """Where the development gateway's listeners on `port` send `request`, as far as a real
    gateway would get: 404 without a listener or route for it, 500 for an invalid
    backendRef (or a rule with no backend to send to), 503 for a Service without ready
    endpoints, and 503 from the pod it reached, where no process listens. `turn` (a request
    counter) spreads requests over weighted backendRefs and endpoints in turn."""
    listeners = select_listeners(http_listeners(objects, port), request.host)
    if not listeners:
        return Decision(
            404,
            "NoListener",
            f"No HTTP listener on port {port} of the development gateway accepts host "
            f"{request.host or '(none)'}.",
        )
    candidate = choose_rule(objects, listeners, request)
    if candidate is None:
        return Decision(
            404,
            "NoRoute",
            f"No HTTPRoute attached to the gateway matches {request.host}{request.path}.",
            (("Listener", "; ".join(listener.label for listener in listeners)),),
        )
    route = candidate.route
    reached: list[tuple[str, str]] = [
        ("HTTPRoute", f"{_namespace(route)}/{_name(route)} (rule {candidate.rule_index})"),
        ("Listener", candidate.listener.label),
    ]
    rule = ((route.get("spec") or {}).get("rules") or [{}])[candidate.rule_index]
    refs = [ref for ref in rule.get("backendRefs") or [] if ref.get("weight", 1) > 0]
    if not refs:
        return Decision(
            500,
            "NoBackend",
            "The matching HTTPRoute rule has no backendRef to send the request to.",
            tuple(reached),
        )
    ref = _weighted(refs, turn)
    backend = resolve_backend(objects, route, ref)
    if backend.problem is not None or backend.service is None or backend.port is None:
        reason, message = backend.problem or ("BackendNotFound", "")
        return Decision(
            500, reason, f"The HTTPRoute's backendRef is invalid: {message}.", tuple(reached)
        )
    service, service_port = backend.service, backend.port
    target = service_port.get("targetPort", service_port.get("port"))
    reached.append(
        ("Service", f"{_namespace(service)}/{_name(service)} port {service_port.get('port')}")
    )
    endpoints = ready_endpoints(objects, service, service_port)
    if not endpoints:
        pods = selected_pods(objects, service)
        shown = ", ".join(f"{_name(pod)} ({_pod_state(pod)})" for pod in pods) or "none"
        reached.append(("Pods selected", shown))
        return Decision(
            503,
            "NoHealthyUpstream",
            f"no healthy upstream: {backend.label} has no ready endpoint for port "
            f"{service_port.get('port')} (targetPort {target}).",
            tuple(reached),
        )
    endpoint = endpoints[turn % len(endpoints)]
    pod = endpoint.pod
    status = pod.get("status") or {}
    owner = _controller(pod)
    reached += [
        ("Unit", owner),
        (
            "Pod",
            f"{_namespace(pod)}/{_name(pod)} on node {(pod.get('spec') or {}).get('nodeName')}"
            f" ({status.get('hostIP')}), pod IP {status.get('podIP')}, port {endpoint.port}",
        ),
    ]
    return Decision(
        503,
        "NoProcess",
        "No process serves this unit in the development cluster: its pods run no containers "
        f"(KWOK), so nothing listens on {status.get('podIP')}:{endpoint.port}.",
        tuple(reached),
    )


def route_conditions(objects: Objects, route: Obj) -> dict[str, tuple[str, str]]:
    """ResolvedRefs of an HTTPRoute as `{"ResolvedRefs": (reason, message)}`: the first
    invalid backendRef's reason, or ResolvedRefs."""
    for rule in (route.get("spec") or {}).get("rules") or []:
        for ref in rule.get("backendRefs") or []:
            problem = resolve_backend(objects, route, ref).problem
            if problem is not None:
                return {"ResolvedRefs": problem}
    return {"ResolvedRefs": ("ResolvedRefs", "")}


def _weighted(refs: Sequence[Mapping[str, Any]], turn: int) -> Mapping[str, Any]:
    total = sum(ref.get("weight", 1) for ref in refs)
    slot = turn % total
    for ref in refs:
        slot -= ref.get("weight", 1)
        if slot < 0:
            return ref
    return refs[-1]


def _controller(pod: Obj) -> str:
    """The pod's controller, which the unit is in this product (a GPUUnit owns its pod)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')} {_namespace(pod)}/{ref.get('name')}"
    return "(the pod has no controller)"


def _pod_state(pod: Obj) -> str:
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    phase = status.get("phase") or "Pending"
    if phase == "Running" and not is_ready(pod):
        return "Running, not Ready"
    return phase


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _namespace(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _age_key(obj: Obj) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return (
        str(metadata.get("creationTimestamp") or ""),
        f"{metadata.get('namespace', '')}/{metadata.get('name', '')}",
    )
