"""The usage ledger's readers and exports at 1,000, 10,000 and 1,000,000 rows (issue: "readers at
1M ÷ 1k rows ≤ 1.5; export ≥ 0.1 of COPY"). No cluster. Prints one JSON line (small: 1,000,
2,000 and 5,000 rows, fewer rounds).

- data: one tenant, a fleet of 1,000 units (three packages: 1 and 8 H100s, 1 A100), one
  sealed row per unit and UTC hour going back from the current hour: 1 hour (1k rows), 10
  hours (10k) and 1,000 hours (1M, about 42 days, so it spans this month and the two before).
  Each size has its own database (a copy of one migrated database with the tenant and the
  price versions), its rows written oldest first by one `INSERT ... SELECT` (as the ledger
  appends them over time), its rollups by `billing.rollups.rebuild()`, then `VACUUM ANALYZE`
  (the steady state of an appended table). What each reader returns is checked against sums
  of the rows.
- readers: in this process, warm, in rounds alternating between the three databases, median:
  usage this UTC month (its start to now, the API's default period) by unit, package and day;
  this month's statement; tenant_costs; costs_by_tenant; budget_of; cost_to_date of the whole
  fleet. And `GET /api/v1/usage?groupBy=unit` (default period) through a gunicorn per
  database, one connection, p50. Figure: time at 10k and at 1M rows over time at 1k; floor
  ≤ 1.5 at 1M.
- export (10k and 1M rows): `billing.exporting.copy_to(fmt, ...)` of every row into a temp
  file, and a FOCUS export as the worker makes it (`billing.jobs.run_export`: rendered, then
  stored in parts for download), rows/s, against the baseline: a plain `COPY (SELECT * FROM
  billing_usagerecord WHERE start >= ... AND start < ... ORDER BY start, id) TO STDOUT
  (FORMAT csv)` of the same rows,
  read with psycopg's cursor.copy() into a temp file, the two in turn. Figure: export rows/s
  over COPY rows/s; floor ≥ 0.1."""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench import harness

UNITS = 1_000
# rows, hours of history (one row per unit and hour)
SIZES = harness.sized(
    ((1_000, 1), (10_000, 10), (1_000_000, 1_000)), ((1_000, 1), (2_000, 2), (5_000, 5))
)
# package, devices per unit, hourly price
PACKAGES = (
    ("bench-h100-1x", 1, "2.4900"),
    ("bench-h100-8x", 8, "19.9200"),
    ("bench-a100-1x", 1, "1.2900"),
)
READERS = (
    "usage_unit",
    "usage_package",
    "usage_day",
    "statement",
    "tenant_costs",
    "costs_by_tenant",
    "budget_of",
    "cost_to_date",
)
READER_FLOOR = 1.5
EXPORT_FLOOR = 0.1
FORMATS = ("focus-csv", "cloudevents", "stripe")
EXPORT_SIZES = tuple(rows for rows, _hours in SIZES[1:])
# Each size has its own database; the readers run in rounds alternating between them (so a
# change in the machine's load falls on every size alike): each round, one untimed call per
# reader on a fresh connection, then READER_CALLS timed ones. Median of all timed calls.
READER_ROUNDS, READER_CALLS = harness.sized((7, 5), (2, 2))
# The endpoint likewise: a gunicorn per size, ENDPOINT_REQUESTS per size and round (and one
# round to warm up). A request can take most of a second at 1M rows, so few.
ENDPOINT_ROUNDS, ENDPOINT_REQUESTS = harness.sized((5, 6), (2, 3))
# Exports: COPY and every format in turn, this many times; median of each.
EXPORT_REPS = dict(zip(EXPORT_SIZES, (3, 2), strict=True))
SOURCE = "//bench.example/billing"


def size_label(rows: int) -> str:
    """1k, 10k, 1M: how the report names a size."""
    if rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}M"
    return f"{rows // 1_000}k" if rows % 1_000 == 0 else str(rows)


def unit_uid(number: int) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"bench-ledger-unit-{number}")


def make_prices() -> dict[str, Any]:
    from billing.models import PriceVersion

    since = datetime(2020, 1, 1, tzinfo=UTC)
    return {
        package: PriceVersion.objects.create(
            package_id=package, hourly=Decimal(hourly), currency="USD", effective_from=since
        )
        for package, _devices, hourly in PACKAGES
    }


def load(tenant: Any, versions: dict[str, Any], *, top: datetime, hours: int) -> None:
    """One row per unit and hour for the `hours` hours before `top`, oldest first."""
    import json

    from django.db import connection

    uids, names, packages, counts, hourly, version_ids, claims, devices = ([] for _ in range(8))
    for number in range(UNITS):
        package, count, price = PACKAGES[number % len(PACKAGES)]
        uids.append(str(unit_uid(number)))
        names.append(f"unit-{number:04d}")
        packages.append(package)
        counts.append(count)
        hourly.append(price)
        version_ids.append(versions[package].pk)
        claims.append(str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench-ledger-claim-{number}")))
        # 1-GPU units eight to a node, 8-GPU units a node each
        node = f"node-{number // 8 + 1}"
        first = 0 if count == 8 else number % 8
        devices.append(
            json.dumps(
                [{"pool": node, "device": f"gpu-{first + i}"} for i in range(count)],
                separators=(",", ":"),
            )
        )
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO billing_usagerecord (
                id, tenant_id, unit_uid, unit_name, region, package_id, alternative, claim_uid,
                devices, start, "end", seconds, quantity, quantity_unit, price_version_id, hourly,
                currency, cost, corrects_id, note, reservation_uid, reservation_status,
                recorded_at)
            SELECT gen_random_uuid(), %(tenant)s, u.uid, u.name, '', u.package, '', u.claim,
                u.devices::jsonb, h.start, h.start + interval '1 hour',
                3600, 3600 * u.count, 'device-seconds', u.version, u.hourly, 'USD', u.hourly,
                NULL, '', NULL, '', h.start + interval '1 hour 1 minute'
            FROM (
                SELECT %(top)s::timestamptz - make_interval(hours => n) AS start
                FROM generate_series(%(hours)s, 1, -1) AS n
            ) AS h,
            unnest(%(uids)s::uuid[], %(names)s::text[], %(packages)s::text[], %(counts)s::int[],
                   %(hourly)s::numeric[], %(versions)s::int[], %(claims)s::text[],
                   %(devices)s::text[])
                AS u(uid, name, package, count, hourly, version, claim, devices)
            ORDER BY h.start, u.name
            """,
            {
                "tenant": tenant.pk,
                "top": top,
                "hours": hours,
                "uids": uids,
                "names": names,
                "packages": packages,
                "counts": counts,
                "hourly": hourly,
                "versions": version_ids,
                "claims": claims,
                "devices": devices,
            },
        )


def vacuum() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("billing_usagerecord", "billing_unitrollup", "billing_packagerollup"):
            cursor.execute(f"VACUUM ANALYZE {table}")


def readers(tenant: Any, *, now: datetime) -> dict[str, Callable[[], Any]]:
    from billing import budgets, periods, selectors, statements

    month = periods.month_start(now)
    uids = [unit_uid(n) for n in range(UNITS)]

    def usage(group_by: str) -> Callable[[], Any]:
        return lambda: selectors.usage(
            start=month, end=now, group_by=group_by, now=now, tenant=tenant
        )

    return {
        "usage_unit": usage("unit"),
        "usage_package": usage("package"),
        "usage_day": usage("day"),
        "statement": lambda: statements.statement(tenant, month, now=now),
        "tenant_costs": lambda: selectors.tenant_costs(tenant, now=now, since=month),
        "costs_by_tenant": lambda: selectors.costs_by_tenant(now=now, since=month),
        "budget_of": lambda: budgets.budget_of(tenant, now=now),
        "cost_to_date": lambda: selectors.cost_to_date(uids, now=now),
    }


def ledger_sums(*, since: datetime | None = None) -> tuple[Decimal, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        if since is None:
            cursor.execute("SELECT coalesce(sum(cost), 0), count(*) FROM billing_usagerecord")
        else:
            cursor.execute(
                "SELECT coalesce(sum(cost), 0), count(*) FROM billing_usagerecord "
                "WHERE start >= %s",
                [since],
            )
        total, rows = cursor.fetchone()
    return Decimal(total), rows


def check(results: dict[str, Any], *, now: datetime) -> list[str]:
    """What the readers returned against sums of the ledger rows: a bench that measures wrong
    answers measures nothing."""
    from billing import periods

    month = periods.month_start(now)
    everything, _rows = ledger_sums()
    this_month, month_rows = ledger_sums(since=month)
    problems = []
    for name in ("usage_unit", "usage_package", "usage_day"):
        got = results[name].total.cost
        if got != this_month:
            problems.append(f"{name} total {got} != ledger {this_month} this month")
    if results["statement"].total != this_month:
        problems.append(f"statement total {results['statement'].total} != {this_month}")
    total, recent = results["tenant_costs"]
    if (total, recent) != (everything, this_month):
        problems.append(f"tenant_costs {total}/{recent} != {everything}/{this_month}")
    if results["budget_of"].spent != this_month:
        problems.append(f"budget_of spent {results['budget_of'].spent} != {this_month}")
    fleet = sum(results["cost_to_date"].values(), Decimal(0))
    if fleet != everything:
        problems.append(f"cost_to_date sum {fleet} != {everything}")
    expected_units = UNITS if month_rows else 0
    if len(results["usage_unit"].groups) != expected_units:
        problems.append(f"usage by unit: {len(results['usage_unit'].groups)} groups")
    return problems


def copy_baseline(start: datetime, end: datetime, out: Any) -> int:
    from django.db import connection

    with connection.cursor() as wrapper:
        cursor = wrapper.cursor
        with cursor.copy(
            "COPY (SELECT * FROM billing_usagerecord WHERE start >= %s AND start < %s "
            "ORDER BY start, id) TO STDOUT (FORMAT csv)",
            (start, end),
        ) as copy:
            for data in copy:
                out.write(data)
        return cursor.rowcount


def timed_export(write: Callable[[Any], int]) -> tuple[float, int, int]:
    """Seconds, rows and bytes of `write(file)` into a fresh temp file."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        rows = write(out)
        elapsed = time.perf_counter() - started
        out.seek(0, os.SEEK_END)
        size = out.tell()
    return elapsed, rows, size


def job_export(start: datetime, end: datetime) -> tuple[float, int, int]:
    """Seconds, rows and bytes of a FOCUS export made as the worker makes one
    (`billing.jobs.run_export`: rendered through COPY, stored in parts for download); the
    export is deleted afterwards, untimed."""
    from billing import jobs
    from billing.models import ExportState, UsageExport

    export = UsageExport.objects.create(format="focus-csv", start=start, end=end, source=SOURCE)
    started = time.perf_counter()
    done = jobs.run_export(export.pk)
    elapsed = time.perf_counter() - started
    assert done is not None
    assert done.state == ExportState.READY, done.error
    rows, size = done.rows_done, done.size
    export.delete()
    return elapsed, rows, size


def measure_exports(size: int, *, start: datetime, end: datetime, figures: dict) -> list[str]:
    """COPY and each format in turn, EXPORT_REPS[size] times; median seconds of each."""
    from billing import exporting

    figures["export_available"] = True
    kinds: dict[str, Callable[[], tuple[float, int, int]]] = {
        "copy": functools.partial(timed_export, lambda out: copy_baseline(start, end, out))
    }
    for fmt in FORMATS:
        write = functools.partial(exporting.copy_to, fmt, start, end, source=SOURCE)
        kinds[fmt] = functools.partial(timed_export, write)
    kinds["job-focus-csv"] = functools.partial(job_export, start, end)
    runs: dict[str, list[tuple[float, int, int]]] = {}
    problems = []
    for _ in range(EXPORT_REPS[size]):
        for kind, measure in kinds.items():
            harness.log(f"{kind} at {size:,} rows")
            runs.setdefault(kind, []).append(measure())
    p = f"r{size}_export_"
    copy_s = statistics.median(run[0] for run in runs["copy"])
    copy_rows = runs["copy"][0][1]
    figures.update(
        {
            p + "reps": EXPORT_REPS[size],
            p + "copy_s": round(copy_s, 4),
            p + "copy_rows_per_s": round(copy_rows / copy_s),
            p + "copy_bytes": runs["copy"][0][2],
        }
    )
    for kind, done in runs.items():
        if kind == "copy" or not done:
            continue
        seconds = statistics.median(run[0] for run in done)
        rows, size_bytes = done[0][1], done[0][2]
        if rows != size:
            problems.append(f"{size} rows: export {kind} says it wrote {rows} rows")
        key = p + kind.replace("-", "_") + "_"
        figures.update(
            {
                key + "s": round(seconds, 4),
                key + "rows": rows,
                key + "rows_per_s": round(rows / seconds),
                key + "bytes": size_bytes,
                key + "ratio": harness.ratio(rows / seconds, copy_rows / copy_s, 3),
            }
        )
    if copy_rows != size:
        problems.append(f"{size} rows: the COPY baseline wrote {copy_rows} rows")
    return problems


def clone(admin_url: str, template: str, name: str) -> str:
    """A copy of the database `template` (migrated, with the tenant and prices) as `name`;
    returns its URL."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))


def drop(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def use_database(name: str) -> None:
    """Point this process's Django connection at database `name` (a fresh backend)."""
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = name


def database_name(rows: int) -> str:
    return f"bench_ledger_{rows}"


def main() -> None:
    admin_url = os.environ.get("DATABASE_URL", "")
    env = harness.setup("ledger")
    from billing import periods, rollups

    tenant, key = harness.make_tenant("bench-ledger")
    versions = make_prices()
    now = datetime.now(UTC)
    top = periods.floor_hour(now)
    month = periods.month_start(now)
    template = urlsplit(env["DATABASE_URL"]).path.lstrip("/")
    use_database(template)  # closes the connection: a template must have none
    urls = {rows: clone(admin_url, template, database_name(rows)) for rows, _hours in SIZES}
    figures: dict[str, Any] = {
        "bench": "ledger",
        "server": harness.SERVER_DESCRIPTION,
        "units": UNITS,
        "packages": len(PACKAGES),
        "sizes": [rows for rows, _hours in SIZES],
        "now": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "month_start": month.strftime("%Y-%m-%d"),
        "reader_rounds": READER_ROUNDS,
        "reader_calls": READER_CALLS,
        "endpoint_rounds": ENDPOINT_ROUNDS,
        "endpoint_requests": ENDPOINT_REQUESTS,
    }
    problems: list[str] = []
    try:
        for rows, hours in SIZES:
            p = f"r{rows}_"
            harness.log(f"ledger at {rows:,} rows ({UNITS} units x {hours} h)")
            use_database(database_name(rows))
            started = time.perf_counter()
            load(tenant, versions, top=top, hours=hours)
            loaded = time.perf_counter()
            written = rollups.rebuild()
            rebuilt = time.perf_counter()
            vacuum()
            figures.update(
                {
                    p + "load_s": round(loaded - started, 2),
                    p + "rebuild_s": round(rebuilt - loaded, 2),
                    p + "vacuum_s": round(time.perf_counter() - rebuilt, 2),
                    p + "rollup_rows": written,
                    p + "month_rows": ledger_sums(since=month)[1],
                }
            )
            if ledger_sums()[1] != rows:
                raise RuntimeError(f"loaded {ledger_sums()[1]} rows, not {rows}")
            results = {name: call() for name, call in readers(tenant, now=now).items()}
            problems += [f"{rows} rows: {problem}" for problem in check(results, now=now)]

        harness.log("readers, rounds alternating between the sizes")
        timings: dict[tuple[int, str], list[float]] = {}
        for _round in range(READER_ROUNDS):
            for rows, _hours in SIZES:
                use_database(database_name(rows))
                for name, call in readers(tenant, now=now).items():
                    with harness.count_statements() as counted:
                        call()  # warm: a fresh backend each round
                    figures[f"r{rows}_{name}_statements"] = counted[0]
                    for _ in range(READER_CALLS):
                        began = time.perf_counter()
                        call()
                        timings.setdefault((rows, name), []).append(time.perf_counter() - began)
        for (rows, name), values in timings.items():
            figures[f"r{rows}_{name}_ms"] = round(statistics.median(values) * 1000, 3)

        harness.log("GET /api/v1/usage?groupBy=unit, a server per size, rounds alternating")
        endpoint = harness.json_request("GET", "/api/v1/usage?groupBy=unit", key=key)
        with contextlib.ExitStack() as servers:
            ports = {}
            for rows, _hours in SIZES:
                os.environ["DATABASE_URL"] = urls[rows]
                ports[rows] = servers.enter_context(harness.gunicorn())
            os.environ["DATABASE_URL"] = env["DATABASE_URL"]
            served: dict[int, harness.LoadResult] = {}
            for round_number in range(ENDPOINT_ROUNDS + 1):
                for rows, _hours in SIZES:
                    result = harness.run_load(
                        ports[rows], lambda i, w: endpoint, concurrency=1, total=ENDPOINT_REQUESTS
                    )
                    result.check(200)
                    if round_number:  # the first round warms the workers
                        total = served.setdefault(rows, harness.LoadResult())
                        total.latencies += result.latencies
                        total.statements.update(result.statements)
        for rows, result in served.items():
            figures[f"r{rows}_endpoint_p50_ms"] = result.percentile_ms(50)
            figures[f"r{rows}_endpoint_p99_ms"] = result.percentile_ms(99)
            figures[f"r{rows}_endpoint_statements"] = result.statements_per_request()

        for rows, hours in SIZES:
            if rows in EXPORT_SIZES:
                use_database(database_name(rows))
                problems += measure_exports(
                    rows, start=top - timedelta(hours=hours), end=top, figures=figures
                )
    finally:
        use_database(template)
        for rows, _hours in SIZES:
            drop(admin_url, database_name(rows))

    small = SIZES[0][0]
    largest = size_label(SIZES[-1][0]).lower()
    for name in (*READERS, "endpoint"):
        suffix = "_p50_ms" if name == "endpoint" else "_ms"
        base = figures[f"r{small}_{name}{suffix}"]
        for rows, _hours in SIZES[1:]:
            figures[f"{name}_ratio_{size_label(rows).lower()}"] = harness.ratio(
                figures[f"r{rows}_{name}{suffix}"], base
            )
    figures["readers_met"] = all(
        figures[f"{name}_ratio_{largest}"] <= READER_FLOOR for name in READERS
    )
    figures["endpoint_met"] = figures[f"endpoint_ratio_{largest}"] <= READER_FLOOR
    if figures.get("export_available"):
        ratios = [
            figures.get(f"r{size}_export_{fmt.replace('-', '_')}_ratio")
            for size in EXPORT_SIZES
            for fmt in (*FORMATS, "job-focus-csv")
        ]
        figures["exports_met"] = all(r is not None and r >= EXPORT_FLOOR for r in ratios)
    figures["problems"] = problems
    harness.emit(figures)


if __name__ == "__main__":
    main()
