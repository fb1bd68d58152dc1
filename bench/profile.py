"""Profile one code path in-process with pyinstrument (a dev tool, not in requirements:
`pip install pyinstrument`): `python -m bench.profile create|replay|list [REQUESTS]`.
Requests go through Django's full middleware stack via django.test.Client."""

from __future__ import annotations

import sys

from bench import harness


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "create"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    harness.setup("profile")
    from django.test import Client
    from pyinstrument import Profiler

    _tenant, key = harness.make_tenant("bench-profile")
    package = harness.make_package()
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_HOST="127.0.0.1")
    body = {"packageID": package.id, "image": "ghcr.io/example/worker:1.0"}

    def create(index: int) -> None:
        name = f"p-{index}"
        response = client.post(
            "/api/v1/gpu-units",
            {"operationID": name, "name": name, **body},
            content_type="application/json",
        )
        assert response.status_code == 201, response.content

    def replay(index: int) -> None:
        response = client.post(
            "/api/v1/gpu-units",
            {"operationID": "replayed", "name": "replayed", **body},
            content_type="application/json",
        )
        assert response.status_code in (200, 201), response.content

    def list_units(index: int) -> None:
        response = client.get("/api/v1/gpu-units?limit=100")
        assert response.status_code == 200, response.content

    def baseline(index: int) -> None:
        response = client.post(
            "/bench/insert", {"operationID": f"b-{index}", **body}, content_type="application/json"
        )
        assert response.status_code == 201, response.content

    from django.db import connection

    from bench.views import CREATE_BASELINE_TABLE

    with connection.cursor() as cursor:
        cursor.execute(CREATE_BASELINE_TABLE)
    action = {"create": create, "replay": replay, "list": list_units, "baseline": baseline}[what]
    for index in range(20):  # warm up: imports, connections, caches
        action(10_000 + index)
    profiler = Profiler(interval=0.0005)
    profiler.start()
    for index in range(count):
        action(index)
    profiler.stop()
    print(profiler.output_text(unicode=False, color=False, show_all=False))


if __name__ == "__main__":
    main()
