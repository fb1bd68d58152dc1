"""List latency: GET /api/v1/gpu-units with 10,000 units in the tenant, page sizes 10 and 100,
first page and a page deep in the list (by cursor), against a raw `SELECT ... LIMIT` view
rendering the same columns as JSON. One connection (latency, not throughput); rounds
alternate. Statements per request must not depend on the page size. No cluster. Prints one
JSON line."""

from __future__ import annotations

import json

from bench import harness

UNITS = harness.sized(10_000, 1_000)
PAGE_SIZES = (10, 100)
ROUNDS = harness.sized(3, 1)
REQUESTS = harness.sized(100, 30)
# The "deep" page: this many units in, by cursor.
DEEP = UNITS // 2


def seed_units(tenant, package) -> None:
    from runtime.models import GPUUnit

    units = [
        GPUUnit(
            tenant=tenant,
            name=f"unit-{index}",
            namespace=tenant.namespace,
            operation_id=f"op-{index}",
            package_id=package.id,
            spec_name=package.spec_name,
            cpu=package.cpu,
            memory=package.memory,
            cpu_millicores=1000,
            memory_bytes=2**30,
            gpu=1,
            device_class_name=package.device_class_name,
            claim_name=f"unit-{index}-gpu",
            claim_request_name="gpu",
            count=1,
            image="ghcr.io/example/worker:1.0",
            phase="Running",
            reason="Running",
            node_name=f"gpu-node-{index % 50}",
            dra={
                "claimName": f"unit-{index}-gpu",
                "allocated": True,
                "devices": [
                    {
                        "request": "gpu",
                        "driver": "gpu.nvidia.com",
                        "pool": f"gpu-node-{index % 50}",
                        "device": f"gpu-{index % 8}",
                    }
                ],
            },
        )
        for index in range(UNITS)
    ]
    GPUUnit.objects.bulk_create(units, batch_size=1000)


def main() -> None:
    harness.setup("api_list")
    tenant, key = harness.make_tenant("bench-list")
    package = harness.make_package()
    seed_units(tenant, package)
    from django.db import connection

    from controlplane.api.pagination import cursor_scope, encode_cursor

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute(
            "SELECT uid FROM runtime_gpuunit WHERE tenant_id = %s ORDER BY id DESC OFFSET %s "
            "LIMIT 1",
            [tenant.pk, DEEP],
        )
        # The cursor the API itself would hand out after that unit (unfiltered list).
        deep_cursor = encode_cursor(str(cursor.fetchone()[0]), cursor_scope(tenant.pk, None, ""))

    def api(limit: int, cursor: str | None = None):
        path = f"/api/v1/gpu-units?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        return lambda index, worker: harness.json_request("GET", path, key=key)

    def raw(limit: int):
        path = f"/bench/units?tenant={tenant.pk}&limit={limit}"
        return lambda index, worker: harness.json_request("GET", path)

    kinds = {}
    for limit in PAGE_SIZES:
        kinds[f"baseline_{limit}"] = raw(limit)
        kinds[f"list_{limit}"] = api(limit)
        kinds[f"list_{limit}_deep"] = api(limit, deep_cursor)
    results: dict[str, list[harness.LoadResult]] = {kind: [] for kind in kinds}
    with harness.gunicorn() as port:
        # The page really has `limit` units and a cursor to the next one.
        for limit in PAGE_SIZES:
            conn_result = _get(port, f"/api/v1/gpu-units?limit={limit}", key)
            if len(conn_result["data"]) != limit or not conn_result["meta"]["nextCursor"]:
                raise RuntimeError(f"unexpected first page at limit {limit}")
        for round_number in range(ROUNDS):
            harness.log(f"api_list round {round_number + 1}/{ROUNDS}")
            for kind, make in kinds.items():
                harness.run_load(port, make, concurrency=1, total=10).check(200)
                result = harness.run_load(port, make, concurrency=1, total=REQUESTS)
                result.check(200)
                results[kind].append(result)

    figures: dict = {
        "bench": "api_list",
        "server": harness.SERVER_DESCRIPTION,
        "units_in_tenant": UNITS,
        "deep_offset": DEEP,
        "concurrency": 1,
        "requests": ROUNDS * REQUESTS,
    }
    p50 = {}
    for kind in kinds:
        merged = harness.LoadResult()
        for result in results[kind]:
            merged.latencies.extend(result.latencies)
            merged.statements.update(result.statements)
        p50[kind] = merged.percentile_ms(50)
        figures[f"{kind}_p50_ms"] = p50[kind]
        figures[f"{kind}_p99_ms"] = merged.percentile_ms(99)
        figures[f"{kind}_statements"] = merged.statements_per_request()
    for limit in PAGE_SIZES:
        figures[f"list_{limit}_ratio"] = harness.ratio(
            p50[f"list_{limit}"], p50[f"baseline_{limit}"]
        )
        figures[f"list_{limit}_deep_ratio"] = harness.ratio(
            p50[f"list_{limit}_deep"], p50[f"baseline_{limit}"]
        )
    statements = {
        figures[f"list_{limit}{deep}_statements"] for limit in PAGE_SIZES for deep in ("", "_deep")
    }
    figures["statements_flat"] = len(statements) == 1
    harness.emit(figures)


def _get(port: int, path: str, key: str) -> dict:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Authorization": f"Bearer {key}"})
    body = conn.getresponse().read()
    conn.close()
    return json.loads(body)


if __name__ == "__main__":
    main()
