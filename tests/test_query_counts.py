"""The statement-count baseline covers exactly the API's routes: a new endpoint cannot go
without a count, and a removed one leaves no stale entry."""

from django.urls import URLPattern, URLResolver, get_resolver

from tests.endpoints import QUERY_COUNTS


def _routes(patterns, prefix: str = "") -> set[str]:
    found: set[str] = set()
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found |= _routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            methods = [
                method
                for method in ("get", "post", "patch", "put", "delete")
                if hasattr(pattern.callback, "cls")
                and (
                    method in (getattr(pattern.callback, "actions", None) or {})
                    or (
                        not getattr(pattern.callback, "actions", None)
                        and hasattr(pattern.callback.cls, method)
                    )
                )
            ]
            path = "/" + route.replace("<str:", "{").replace(">", "}")
            found |= {f"{method.upper()} {path}" for method in methods}
    return found


def test_every_api_route_has_a_statement_count_and_every_count_a_route():
    routes = {
        route
        for route in _routes(get_resolver("controlplane.urls").url_patterns)
        if route.split(" ", 1)[1].startswith("/api/v1/")
    }
    assert routes == set(QUERY_COUNTS)
