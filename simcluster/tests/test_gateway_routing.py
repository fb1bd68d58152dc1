"""The simulated gateway's routing rules, pure: objects in, decision out. The scenarios follow
the Gateway API's HTTPRoute spec and its conformance tests (listener hostname matching,
hostname intersection, match precedence, ReferenceGrant, invalid backendRefs)."""

from __future__ import annotations

from typing import Any

import pytest

from simcluster.gateway import render
from simcluster.gatewayapi import (
    GATEWAY_CLASSES,
    GATEWAY_CONTROLLER,
    GATEWAYS,
    HTTP_ROUTES,
    REFERENCE_GRANTS,
    ObjectSet,
    Request,
    decide,
    hostname_matches,
    intersect,
    path_matches,
    request_host,
)

INFRA = "infra"


def gateway_class(name: str = "sim", controller: str = GATEWAY_CONTROLLER) -> tuple[str, dict]:
    return GATEWAY_CLASSES, {"metadata": {"name": name}, "spec": {"controllerName": controller}}


def gateway(
    *listeners: dict[str, Any], name: str = "gw", namespace: str = INFRA, class_name: str = "sim"
) -> tuple[str, dict]:
    return GATEWAYS, {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"gatewayClassName": class_name, "listeners": list(listeners)},
    }


def listener(name: str = "http", hostname: str | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "port": 80, "protocol": "HTTP", **extra}
    if hostname:
        spec["hostname"] = hostname
    return spec


def route(
    name: str,
    *,
    namespace: str = INFRA,
    hostnames: list[str] | None = None,
    rules: list[dict[str, Any]] | None = None,
    parents: list[dict[str, Any]] | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> tuple[str, dict]:
    spec: dict[str, Any] = {
        "parentRefs": parents or [{"name": "gw", "namespace": INFRA}],
        "rules": rules if rules is not None else [{"backendRefs": [backend(name)]}],
    }
    if hostnames:
        spec["hostnames"] = hostnames
    return HTTP_ROUTES, {
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": spec,
    }


def backend(service: str, port: int = 8080, **extra: Any) -> dict[str, Any]:
    return {"name": service, "port": port, **extra}


def prefix(value: str, service: str) -> dict[str, Any]:
    return {
        "matches": [{"path": {"type": "PathPrefix", "value": value}}],
        "backendRefs": [backend(service)],
    }


def service(name: str, *, namespace: str = INFRA, selector: dict | None = None) -> tuple[str, dict]:
    return "services", {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": selector if selector is not None else {"app": name},
            "ports": [{"name": "http", "port": 8080, "targetPort": "http"}],
        },
    }


def pod(
    name: str,
    *,
    app: str,
    namespace: str = INFRA,
    ready: bool = True,
    owner: str | None = None,
) -> tuple[str, dict]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": app}}
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "runtime.lokiwager.io/v1alpha1",
                "kind": "GPUUnit",
                "name": owner,
                "uid": "u1",
                "controller": True,
            }
        ]
    status: dict[str, Any] = {"phase": "Pending"}
    if ready:
        status = {
            "phase": "Running",
            "podIP": "10.244.1.7",
            "hostIP": "10.0.0.3",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    return "pods", {
        "metadata": metadata,
        "spec": {
            "nodeName": "gpu-node-1",
            "containers": [{"name": "worker", "ports": [{"name": "http", "containerPort": 8080}]}],
        },
        "status": status,
    }


def world(*objects: tuple[str, dict]) -> ObjectSet:
    return ObjectSet([gateway_class(), *objects])


def ask(objects: ObjectSet, host: str, path: str = "/", **extra: Any):
    return decide(objects, port=80, request=Request(host=request_host(host), path=path, **extra))


def reached(decision) -> dict[str, str]:
    return dict(decision.reached)


def backend_of(decision) -> str:
    """The Service a request reached (the tests' pods all stand ready behind theirs)."""
    return reached(decision)["Service"].split()[0].split("/")[1]


def backends(*names: str) -> list[tuple[str, dict]]:
    """A Service and one ready pod behind each name."""
    return [obj for name in names for obj in (service(name), pod(f"{name}-0", app=name))]


# -- hostnames --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "host", "matches"),
    [
        (None, "anything.example", True),
        ("bar.com", "bar.com", True),
        ("bar.com", "foo.bar.com", False),
        ("*.bar.com", "foo.bar.com", True),
        ("*.bar.com", "multiple.prefixes.bar.com", True),
        ("*.bar.com", "bar.com", False),
        ("*.bar.com", "foobar.com", False),
    ],
)
def test_a_wildcard_hostname_matches_one_or_more_labels_but_not_the_bare_domain(
    pattern, host, matches
):
    assert hostname_matches(pattern, host) is matches


@pytest.mark.parametrize(
    ("listener_hostname", "route_hostname", "served"),
    [
        (None, "a.example.com", "a.example.com"),
        ("very.specific.com", "*.specific.com", "very.specific.com"),
        ("*.wildcard.io", "foo.bar.wildcard.io", "foo.bar.wildcard.io"),
        ("*.wildcard.io", "wildcard.io", None),
        ("*.wildcard.io", "*.foo.wildcard.io", "*.foo.wildcard.io"),
        ("*.wildcard.io", "*.io", "*.wildcard.io"),
        ("very.specific.com", "non.matching.com", None),
    ],
)
def test_route_hostnames_intersect_the_listeners_as_the_spec_says(
    listener_hostname, route_hostname, served
):
    assert intersect(listener_hostname, route_hostname) == served


def test_the_host_headers_port_and_case_are_ignored():
    assert request_host("Very.Specific.com:1234") == "very.specific.com"
    assert request_host("[::1]:8003") == "[::1]"


@pytest.mark.parametrize(
    ("match", "path", "matches"),
    [
        ({"type": "PathPrefix", "value": "/abc"}, "/abc", True),
        ({"type": "PathPrefix", "value": "/abc"}, "/abc/", True),
        ({"type": "PathPrefix", "value": "/abc/"}, "/abc/def", True),
        ({"type": "PathPrefix", "value": "/abc"}, "/abcd", False),
        ({"type": "PathPrefix", "value": "/"}, "/anything", True),
        ({"type": "Exact", "value": "/abc"}, "/abc", True),
        ({"type": "Exact", "value": "/abc"}, "/abc/", False),
        ({"type": "Exact", "value": "/abc"}, "/Abc", False),
    ],
)
def test_path_prefix_matches_element_by_element_and_exact_the_whole_path(match, path, matches):
    assert path_matches(match, path) is matches


# -- listeners, routes and precedence ---------------------------------------------------------


def test_the_most_specific_listener_hostname_takes_the_request():
    """Conformance HTTPRouteListenerHostnameMatching: four listeners on port 80."""
    objects = world(
        gateway(
            listener("listener-1", "bar.com"),
            listener("listener-2", "foo.bar.com"),
            listener("listener-3", "*.bar.com"),
            listener("listener-4", "*.foo.com"),
        ),
        route("v1", parents=[{"name": "gw", "sectionName": "listener-1"}]),
        route("v2", parents=[{"name": "gw", "sectionName": "listener-2"}]),
        route(
            "v3",
            parents=[
                {"name": "gw", "sectionName": "listener-3"},
                {"name": "gw", "sectionName": "listener-4"},
            ],
        ),
        *backends("v1", "v2", "v3"),
    )
    assert backend_of(ask(objects, "bar.com")) == "v1"
    assert backend_of(ask(objects, "foo.bar.com")) == "v2"
    for host in ("baz.bar.com", "multiple.prefixes.bar.com", "multiple.prefixes.foo.com"):
        assert backend_of(ask(objects, host)) == "v3", host
    for host in ("foo.com", "no.matching.host"):
        assert ask(objects, host).status == 404, host


def test_an_exact_route_hostname_wins_over_a_wildcard_one():
    objects = world(
        gateway(listener()),
        route("wild", hostnames=["*.units.example"], created="2025-01-01T00:00:00Z"),
        route("exact", hostnames=["a.units.example"]),
        *backends("wild", "exact"),
    )
    assert backend_of(ask(objects, "a.units.example")) == "exact"
    assert backend_of(ask(objects, "b.units.example")) == "wild"
    assert ask(objects, "units.example").status == 404


def test_an_exact_path_then_the_longest_prefix_wins_across_routes():
    objects = world(
        gateway(listener()),
        route("root", hostnames=["h.example"], rules=[prefix("/", "root")]),
        route("api", hostnames=["h.example"], rules=[prefix("/api", "api")]),
        route(
            "exact",
            hostnames=["h.example"],
            rules=[
                {
                    "matches": [{"path": {"type": "Exact", "value": "/api/health"}}],
                    "backendRefs": [backend("exact")],
                }
            ],
        ),
        *backends("root", "api", "exact"),
    )
    assert backend_of(ask(objects, "h.example", "/api/v1")) == "api"
    assert backend_of(ask(objects, "h.example", "/api")) == "api"
    assert backend_of(ask(objects, "h.example", "/apis")) == "root"
    assert backend_of(ask(objects, "h.example", "/api/health")) == "exact"
    assert backend_of(ask(objects, "h.example", "/api/health/")) == "api"


def test_ties_go_to_the_oldest_route_then_by_namespace_and_name():
    objects = world(
        gateway(listener()),
        route("young", created="2026-06-01T00:00:00Z"),
        route("old", created="2026-01-01T00:00:00Z"),
        route("also-old", created="2026-01-01T00:00:00Z"),
        *backends("young", "old", "also-old"),
    )
    assert backend_of(ask(objects, "x.example")) == "also-old"


def test_a_route_matches_a_method_and_headers_before_a_bare_path():
    objects = world(
        gateway(listener()),
        route(
            "special",
            rules=[
                {
                    "matches": [
                        {
                            "path": {"value": "/"},
                            "method": "POST",
                            "headers": [{"name": "X-Version", "value": "2"}],
                        }
                    ],
                    "backendRefs": [backend("special")],
                }
            ],
        ),
        route("plain"),
        *backends("special", "plain"),
    )
    assert backend_of(ask(objects, "h", method="POST", headers={"x-version": "2"})) == "special"
    assert backend_of(ask(objects, "h", method="GET", headers={"x-version": "2"})) == "plain"


def test_a_listener_takes_routes_of_other_namespaces_only_when_it_allows_all():
    elsewhere = [
        route("r", namespace="tenant-a", parents=[{"name": "gw", "namespace": INFRA}]),
        service("r", namespace="tenant-a"),
    ]
    same = world(gateway(listener()), *elsewhere)  # allowedRoutes defaults to Same
    assert ask(same, "h").status == 404
    everyone = world(gateway(listener(allowedRoutes={"namespaces": {"from": "All"}})), *elsewhere)
    assert ask(everyone, "h").reason == "NoHealthyUpstream"


def test_a_listener_selecting_namespaces_by_label_takes_routes_from_those_only():
    selector = {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"gw": "yes"}}}}
    labelled = ("namespaces", {"metadata": {"name": "tenant-a", "labels": {"gw": "yes"}}})
    plain = ("namespaces", {"metadata": {"name": "tenant-b"}})
    objects = world(
        gateway(listener(allowedRoutes=selector)),
        labelled,
        plain,
        route(
            "a",
            namespace="tenant-a",
            hostnames=["a.example"],
            parents=[{"name": "gw", "namespace": INFRA}],
        ),
        route(
            "b",
            namespace="tenant-b",
            hostnames=["b.example"],
            parents=[{"name": "gw", "namespace": INFRA}],
        ),
    )
    assert ask(objects, "a.example").status == 500  # attached: its Service is missing
    assert ask(objects, "b.example").status == 404


def test_gateways_of_another_controller_and_other_ports_are_not_served():
    objects = world(
        gateway_class("other", "example.com/other"),
        gateway(listener(), class_name="other"),
        gateway(listener(port=8080), name="gw2"),
        route("r"),
        *backends("r"),
    )
    decision = ask(objects, "h")
    assert (decision.status, decision.reason) == (404, "NoListener")


def test_a_section_name_attaches_a_route_to_that_listener_only():
    objects = world(
        gateway(listener("a", "a.example"), listener("b", "b.example")),
        route("r", parents=[{"name": "gw", "sectionName": "a"}]),
        *backends("r"),
    )
    assert ask(objects, "a.example").reason == "NoProcess"
    assert ask(objects, "b.example").status == 404


# -- backends ---------------------------------------------------------------------------------


def test_a_cross_namespace_backend_needs_a_reference_grant_in_its_namespace():
    cross = route("r", rules=[{"backendRefs": [backend("svc", namespace="tenant-a")]}])
    target = [service("svc", namespace="tenant-a"), pod("svc-0", app="svc", namespace="tenant-a")]
    refused = ask(world(gateway(listener()), cross, *target), "h")
    assert (refused.status, refused.reason) == (500, "RefNotPermitted")
    assert "ReferenceGrant in namespace tenant-a" in refused.summary

    def grant(from_namespace: str, to_name: str | None) -> tuple[str, dict]:
        to: dict[str, Any] = {"group": "", "kind": "Service"}
        if to_name:
            to["name"] = to_name
        return REFERENCE_GRANTS, {
            "metadata": {"name": "g", "namespace": "tenant-a"},
            "spec": {
                "from": [
                    {
                        "group": "gateway.networking.k8s.io",
                        "kind": "HTTPRoute",
                        "namespace": from_namespace,
                    }
                ],
                "to": [to],
            },
        }

    for allowed in (grant(INFRA, None), grant(INFRA, "svc")):
        decision = ask(world(gateway(listener()), cross, *target, allowed), "h")
        assert decision.reason == "NoProcess"
        assert reached(decision)["Service"] == "tenant-a/svc port 8080"
    for other in (grant("someone-else", None), grant(INFRA, "another-svc")):
        assert ask(world(gateway(listener()), cross, *target, other), "h").status == 500


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        (backend("missing"), "BackendNotFound"),
        (backend("svc", port=9999), "BackendNotFound"),
        ({"name": "svc"}, "BackendNotFound"),
        (backend("svc", kind="ConfigMap"), "InvalidKind"),
        (backend("svc", group="example.com", kind="Backend"), "InvalidKind"),
    ],
)
def test_an_invalid_backend_ref_answers_500(ref, reason):
    objects = world(
        gateway(listener()), route("r", rules=[{"backendRefs": [ref]}]), *backends("svc")
    )
    decision = ask(objects, "h")
    assert (decision.status, decision.reason) == (500, reason)


def test_a_rule_without_backends_answers_500_and_weight_zero_takes_no_traffic():
    objects = world(gateway(listener()), route("r", rules=[{}]))
    assert ask(objects, "h").status == 500
    weighted = world(
        gateway(listener()),
        route("r", rules=[{"backendRefs": [backend("off", weight=0), backend("on")]}]),
        *backends("off", "on"),
    )
    for turn in range(4):
        decision = decide(weighted, port=80, request=Request(host="h", path="/"), turn=turn)
        assert backend_of(decision) == "on"


def test_no_route_for_the_host_is_a_404():
    objects = world(gateway(listener()), route("r", hostnames=["a.example"]), *backends("r"))
    decision = ask(objects, "b.example")
    assert (decision.status, decision.reason) == (404, "NoRoute")


def test_a_service_without_ready_pods_is_503_no_healthy_upstream_naming_it():
    objects = world(
        gateway(listener()),
        route("r", rules=[{"backendRefs": [backend("svc")]}]),
        service("svc"),
        pod("svc-0", app="svc", ready=False),
    )
    decision = ask(objects, "h")
    assert (decision.status, decision.reason) == (503, "NoHealthyUpstream")
    assert decision.summary.startswith("no healthy upstream: Service infra/svc")
    assert reached(decision)["Pods selected"] == "svc-0 (Pending)"


def test_a_pod_without_the_named_target_port_is_no_endpoint():
    _, bare = pod("svc-0", app="svc")
    bare["spec"]["containers"][0]["ports"] = []
    objects = world(
        gateway(listener()),
        route("r", rules=[{"backendRefs": [backend("svc")]}]),
        service("svc"),
        ("pods", bare),
    )
    assert ask(objects, "h").reason == "NoHealthyUpstream"


def test_a_reached_pod_answers_503_naming_the_route_unit_service_and_pod():
    objects = world(
        gateway(listener(allowedRoutes={"namespaces": {"from": "All"}})),
        route(
            "unit-demo",
            namespace="tenant-a",
            hostnames=["demo.units.example"],
            parents=[{"name": "gw", "namespace": INFRA}],
        ),
        service("unit-demo", namespace="tenant-a"),
        pod("unit-demo", app="unit-demo", namespace="tenant-a", owner="demo"),
    )
    decision = ask(objects, "demo.units.example:8003", "/notebook")
    assert (decision.status, decision.reason) == (503, "NoProcess")
    assert decision.summary.startswith("No process serves this unit in the simulated cluster")
    assert reached(decision) == {
        "HTTPRoute": "tenant-a/unit-demo (rule 0)",
        "Listener": "Gateway infra/gw, listener http",
        "Service": "tenant-a/unit-demo port 8080",
        "Unit": "GPUUnit tenant-a/demo",
        "Pod": "tenant-a/unit-demo on node gpu-node-1 (10.0.0.3), pod IP 10.244.1.7, port 8080",
    }


def test_the_page_is_text_for_curl_and_escaped_html_for_browsers():
    objects = world(gateway(listener()), route("r", hostnames=["a.example"]), *backends("r"))
    decision = ask(objects, "a.example", "/<script>")
    content_type, body = render(decision, html_page=False)
    assert content_type.startswith("text/plain")
    assert body.decode().startswith("503 Service Unavailable\n\nNo process serves this unit")
    content_type, body = render(ask(objects, "<b>.example"), html_page=True)
    assert content_type.startswith("text/html")
    assert b"&lt;b&gt;.example" in body
    assert b"<b>.example" not in body
