"""Inventory sync at 10, 1,000 and 10,000 devices (2, 200 and 2,000 allocated claims, each
with its pod) against a raw bulk upsert of the same rows, and the operator inventory endpoint
at each size. Prints one JSON line.

- cluster: for each size a development cluster of that many H100s (the real API server,
  scheduler and controller-manager, KWOK nodes), and the claims and their pods (a unit of the
  sample catalog's 1 x H100 package each, no GPUUnit) created straight against it and
  allocated by its scheduler before anything is timed.
- sync: `inventory.sync.sync_inventory()` in this process against that cluster (fetch over
  HTTPS from its API server, observe, diff, apply). "cold" starts from empty mirror tables,
  "warm" re-syncs an unchanged cluster (the steady state beat sees every interval).
- baseline: the rows that sync wrote (computed once, untimed), written by psycopg COPY into a
  temporary table and one `INSERT ... SELECT ... ON CONFLICT DO UPDATE` per mirror table, plus
  the snapshot row: no fetch, no diff. Cold into empty tables, warm over the same rows.
- endpoint: GET /api/v1/operator/inventory through gunicorn, one connection, p50."""

from __future__ import annotations

import time

from bench import harness

# devices, nodes, GPUs per node, allocated claims
SIZES = harness.sized(
    ((10, 1, 10, 2), (1_000, 125, 8, 200), (10_000, 1_250, 8, 2_000)),
    ((10, 1, 10, 2), (40, 5, 8, 8), (80, 10, 8, 16)),
)
COLD_REPS = 2
WARM_REPS = 3
ENDPOINT_REQUESTS = harness.sized(200, 50)
CLAIM_PACKAGE = "gpu-h100-1x-cpu16-mem128g"  # catalog/samples/packages.yaml
CLAIMS_NAMESPACE = "bench-claims"
ALLOCATE_TIMEOUT_SECONDS = 900.0


def _mirror_models() -> list:
    from inventory import models

    return [
        models.Node,
        models.DeviceClass,
        models.DevicePool,
        models.Device,
        models.Claim,
        models.Quota,
        models.PackageAvailability,
        models.InventorySnapshot,
    ]


def truncate_mirror() -> None:
    from django.db import connection

    tables = ", ".join(model._meta.db_table for model in _mirror_models())
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {tables}")


def desired_rows() -> tuple[dict, str]:
    """Model -> (key columns besides the cluster, rows) exactly as the sync computes them, and
    the cluster they are of."""
    import json

    from django.conf import settings
    from django.utils import timezone

    from inventory import models, observe, sync

    packages = sync.package_specs()
    observation = observe.observe(**sync.fetch(), packages=packages)
    document = observe.build_document(observation)
    availability = observe.package_availability(observation, packages)
    return {
        models.Node: (["name"], list(observation.nodes.values())),
        models.DeviceClass: (["name"], list(observation.classes.values())),
        models.DevicePool: (["driver", "name"], list(observation.pools.values())),
        models.Device: (["driver", "pool", "name"], list(observation.devices.values())),
        models.Claim: (["namespace", "name"], list(observation.claims.values())),
        models.Quota: (["namespace", "name"], list(observation.quotas.values())),
        models.PackageAvailability: (
            ["package_id"],
            [{"package_id": pid, **row} for pid, row in availability.items()],
        ),
        models.InventorySnapshot: (
            [],
            [{"as_of": timezone.now(), "document": json.dumps(document)}],
        ),
    }, settings.CLUSTER_NAME


def raw_upsert(rows: dict, cluster: str) -> int:
    """COPY + INSERT ... ON CONFLICT per table, in one transaction, every row `cluster`'s (a
    field a row leaves out gets its default, as the sync's rows do); returns statements."""
    import orjson
    from django.contrib.postgres.fields import ArrayField
    from django.db import connection, transaction
    from django.db.models import JSONField
    from psycopg.types.json import Jsonb

    def jsonb(value):
        return Jsonb(value, orjson.dumps)  # the fastest encoder we have, as the sync uses

    statements = 0
    with transaction.atomic(), connection.cursor() as wrapper:
        cursor = wrapper.cursor
        for model, (keys, records) in rows.items():
            if not records:
                continue
            table = model._meta.db_table
            fields = [f for f in model._meta.concrete_fields if f.name != "id"]
            defaults = {f.name: f.get_default() for f in fields}
            columns = [f.column for f in fields]
            names = ", ".join(columns)
            temp = f"bench_{table}"
            cursor.execute(
                f"CREATE TEMP TABLE {temp} ON COMMIT DROP AS "
                f"SELECT {names} FROM {table} WITH NO DATA"
            )
            wrap = [
                jsonb if isinstance(f, JSONField) else list if isinstance(f, ArrayField) else None
                for f in fields
            ]
            with cursor.copy(f"COPY {temp} ({names}) FROM STDIN") as copy:
                for record in records:
                    values = {**defaults, **record, "cluster": cluster}
                    copy.write_row(
                        [
                            w(values[f.name]) if w else values[f.name]
                            for f, w in zip(fields, wrap, strict=True)
                        ]
                    )
            conflict = ["cluster", *keys]
            updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in conflict)
            cursor.execute(
                f"INSERT INTO {table} ({names}) SELECT {names} FROM {temp} "
                f"ON CONFLICT ({', '.join(conflict)}) DO UPDATE SET {updates}"
            )
            statements += 3
    return statements


def timed_sync() -> tuple[float, int, object]:
    from inventory.sync import sync_inventory

    with harness.count_statements() as counted:
        started = time.perf_counter()
        run = sync_inventory()
        elapsed = time.perf_counter() - started
    if run is None or run.error:
        raise RuntimeError(f"sync failed: {run and run.error}")
    return elapsed, counted[0], run


def allocate_claims(cluster: harness.DevCluster, claims: int) -> None:
    """`claims` claims of one H100, each with its pod, made straight against the cluster; until
    its scheduler allocated them all (their pods Running)."""
    from catalog.models import Package

    package = Package.objects.get(pk=CLAIM_PACKAGE)
    harness.direct_namespace(cluster, CLAIMS_NAMESPACE)
    running = harness.PodsRunning(cluster, CLAIMS_NAMESPACE).start()
    harness.create_claims_and_pods(
        cluster,
        [harness.direct_objects(package, f"job-{n}", CLAIMS_NAMESPACE) for n in range(claims)],
    )
    running.wait(claims, timeout=ALLOCATE_TIMEOUT_SECONDS)


def measure(port: int, endpoint: harness.Request, devices: int, claims: int) -> dict:
    """The sync, the baseline and the endpoint against the cluster this process uses now."""
    # Untimed: the process's first call to a cluster opens its connection and looks the
    # cluster up in the registry (one statement), which is no part of a sync's cost.
    timed_sync()
    cold, cold_statements = [], set()
    for _ in range(COLD_REPS):
        truncate_mirror()
        elapsed, statements, run = timed_sync()
        cold.append(elapsed)
        cold_statements.add(statements)
    if run.counts["devices"] != devices or run.counts["claims"] != claims:
        raise RuntimeError(f"unexpected sync counts {run.counts}")
    warm, warm_statements = [], set()
    for _ in range(WARM_REPS):
        elapsed, statements, _run = timed_sync()
        warm.append(elapsed)
        warm_statements.add(statements)
    rows, cluster = desired_rows()
    raw_cold, raw_warm = [], []
    for _ in range(COLD_REPS):
        truncate_mirror()
        started = time.perf_counter()
        raw_statements = raw_upsert(rows, cluster)
        raw_cold.append(time.perf_counter() - started)
    for _ in range(WARM_REPS):
        started = time.perf_counter()
        raw_upsert(rows, cluster)
        raw_warm.append(time.perf_counter() - started)
    harness.run_load(port, lambda i, w: endpoint, concurrency=1, total=20).check(200)
    served = harness.run_load(port, lambda i, w: endpoint, concurrency=1, total=ENDPOINT_REQUESTS)
    served.check(200)
    size = f"d{devices}"
    return {
        f"{size}_claims": claims,
        f"{size}_sync_cold_s": round(harness.median(cold), 4),
        f"{size}_sync_warm_s": round(harness.median(warm), 4),
        f"{size}_upsert_cold_s": round(harness.median(raw_cold), 4),
        f"{size}_upsert_warm_s": round(harness.median(raw_warm), 4),
        f"{size}_cold_ratio": harness.ratio(harness.median(cold), harness.median(raw_cold)),
        f"{size}_warm_ratio": harness.ratio(harness.median(warm), harness.median(raw_warm)),
        f"{size}_sync_cold_statements": sorted(cold_statements),
        f"{size}_sync_warm_statements": sorted(warm_statements),
        f"{size}_upsert_statements": raw_statements,
        f"{size}_endpoint_p50_ms": served.percentile_ms(50),
        f"{size}_endpoint_p99_ms": served.percentile_ms(99),
        f"{size}_endpoint_statements": served.statements_per_request(),
    }


def main() -> None:
    harness.setup("inventory")
    from django.core.management import call_command

    call_command("import_catalog", str(harness.ROOT / "catalog/samples/packages.yaml"))
    _tenant, operator_key = harness.make_tenant("bench-ops", operator=True)
    endpoint = harness.json_request("GET", "/api/v1/operator/inventory", key=operator_key)
    sizes = [devices for devices, *_ in SIZES]
    figures: dict = {
        "bench": "inventory",
        "server": harness.SERVER_DESCRIPTION,
        "sizes": sizes,
        "cold_reps": COLD_REPS,
        "warm_reps": WARM_REPS,
        "endpoint_requests": ENDPOINT_REQUESTS,
    }
    with harness.gunicorn() as port:
        for devices, nodes, gpus, claims in SIZES:
            harness.log(f"inventory at {devices} devices, {claims} claims")
            with harness.dev_cluster("default", nodes=nodes, gpus_per_node=gpus) as cluster:
                harness.use_cluster(cluster.kubeconfig)
                allocate_claims(cluster, claims)
                figures.update(measure(port, endpoint, devices, claims))
    smallest, largest = sizes[0], sizes[-1]
    figures["endpoint_ratio_largest_vs_smallest"] = harness.ratio(
        figures[f"d{largest}_endpoint_p50_ms"], figures[f"d{smallest}_endpoint_p50_ms"]
    )
    figures["sync_statements_flat"] = all(
        len({tuple(figures[f"d{devices}_sync_{key}_statements"]) for devices in sizes}) == 1
        for key in ("cold", "warm")
    )
    harness.emit(figures)


if __name__ == "__main__":
    main()
