# ruff: noqa: RUF001 - the report uses typographic multiplication signs.
"""Writes docs/benchmarks.md: the benchmarks' figures from their JSON lines
(test-artifacts/benchmarks.jsonl), the hand-kept record of what was profiled and changed
(bench/findings.md), and, as they are, the figures of earlier runs the document keeps below
KEPT (each run rewrites only what is above it)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from bench.harness import RESULTS, ROOT
from bench.ledger import size_label

DOCUMENT = ROOT / "docs" / "benchmarks.md"
FINDINGS = ROOT / "bench" / "findings.md"
KEPT = "<!-- bench/report.py rewrites what is above this line and keeps what follows as it is -->"
COMMAND = "`.venv/bin/python -m devstack exec -- .venv/bin/python -m bench.{name}`"
# The create API must keep at least this share of the bare-INSERT baseline's throughput (the
# hand-written order in runtime/orders.py exists to hold it; ARCHITECTURE §4).
CREATE_FLOOR = 0.2
# With the observer (ARCHITECTURE §13): the control plane's share of an idle unit's time to
# Running, and a burst's throughput against creating the same claims and pods directly.
OVERHEAD_FLOOR_S = 0.5
BURST_FLOOR = 0.7
# At 10,000 running units (issue 24): the observer's resident set, and the work of one of
# beat's backstop ticks (a page of RECONCILE_PAGE_SIZE units).
OBSERVER_RSS_CEILING_MB = 200
TICK_CEILING_S = 0.5
# The ledger (issue: "readers at 1M ÷ 1k rows ≤ 1.5; export ≥ 0.1 of COPY").
LEDGER_READER_CEILING = 1.5
LEDGER_EXPORT_FLOOR = 0.1
# The sizes a full run measures, for figures that do not list theirs.
INVENTORY_SIZES = (10, 1_000, 10_000)
OBSERVER_SIZES = (10, 2_000)
LEDGER_SIZES = (1_000, 10_000, 1_000_000)


def load(path: Path) -> dict[str, dict]:
    if not path.exists():
        return {}
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {figures["bench"]: figures for figures in lines}


def _floor(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _header(name: str, title: str, figures: dict | None) -> list[str]:
    out = [f"## {title}", ""]
    if figures is None:
        return [
            *out,
            f"Command: {COMMAND.format(name=name)}. Not measured on the development clusters "
            "yet; the last figures are in the section after the JSON lines, if it has some.",
            "",
        ]
    out.append(
        f"Command: {COMMAND.format(name=name)} "
        f"(ran {figures.get('ran_at', '?')}, {figures.get('seconds', '?')} s)."
    )
    if figures.get("small"):
        out.append(
            "**A small run** (`BENCH_SMALL=1`): its sizes only check that the script works end "
            "to end; these are not the benchmark's figures."
        )
    return [*out, ""]


def _create(f: dict) -> list[str]:
    rows = [
        ("POST, new operationID, 8 tenants", "create"),
        ("POST, new operationID, 1 tenant", "create_one_tenant"),
        ("POST, replay of one operationID", "replay"),
    ]
    out = [
        f"{f['server']}; {f['concurrency']} client connections (http.client, one thread each, "
        f"keep-alive) on loopback; {f['rounds']} rounds of {f['seconds_per_round']:g} s per "
        "kind, alternating, median req/s. Baseline: `POST /bench/insert`, a bare Django view "
        "doing one INSERT (bench/views.py), same server, same connections. No cluster: "
        f"nothing takes the queued provisioning tasks. Statements per request: "
        f"{f['statement_count']}.",
        "",
        "| request | req/s | baseline req/s | ratio | p50 ms | p99 ms | SQL statements | floor |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, kind in rows:
        floor = (
            f"≥ {CREATE_FLOOR}: {_floor(f[f'{kind}_ratio'] >= CREATE_FLOOR)}"
            if kind == "create"
            else ""
        )
        out.append(
            f"| {label} | {f[f'{kind}_rps']} | {f['baseline_rps']} | {f[f'{kind}_ratio']} | "
            f"{f[f'{kind}_p50_ms']} | {f[f'{kind}_p99_ms']} | {f[f'{kind}_statements']} | "
            f"{floor} |"
        )
    out.append(
        f"| baseline (one INSERT) | {f['baseline_rps']} | | 1 | {f['baseline_p50_ms']} | "
        f"{f['baseline_p99_ms']} | {f['baseline_statements']} | |"
    )
    if "create_cpu_ms" in f:
        groups = list(f["create_cpu_ms"])
        out += [
            "",
            "Where each request's CPU goes (the machine's 2 cores are the limit, so req/s is "
            f"about 2,000 ms / the total): {f['cpu']}.",
            "",
            f"| request | {' | '.join(groups)} | total |",
            f"| --- | {' | '.join('---' for _ in groups)} | --- |",
        ]
        for label, kind in [*rows, ("baseline (one INSERT)", "baseline")]:
            spent = f[f"{kind}_cpu_ms"]
            out.append(
                f"| {label} | {' | '.join(str(spent[g]) for g in groups)} | "
                f"{round(sum(spent.values()), 3)} |"
            )
    return [*out, ""]


def _list(f: dict) -> list[str]:
    out = [
        f"`GET /api/v1/gpu-units` with {f['units_in_tenant']:,} units in the tenant, one "
        f"connection, {f['requests']} requests per kind (rounds alternating), p50 latency. "
        "Baseline: `GET /bench/units`, one raw `SELECT <the same columns> ... ORDER BY id DESC "
        'LIMIT n` rendered with json.dumps. "deep" is a page '
        f"{f.get('deep_offset', 5000):,} units in, by cursor. No cluster.",
        "",
        "| page size | list p50 ms | deep page p50 ms | raw SELECT p50 ms | ratio | deep ratio "
        "| list p99 ms | SQL statements (list / deep / raw) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in (10, 100):
        out.append(
            f"| {n} | {f[f'list_{n}_p50_ms']} | {f[f'list_{n}_deep_p50_ms']} | "
            f"{f[f'baseline_{n}_p50_ms']} | {f[f'list_{n}_ratio']} | "
            f"{f[f'list_{n}_deep_ratio']} | {f[f'list_{n}_p99_ms']} | "
            f"{f[f'list_{n}_statements']} / {f[f'list_{n}_deep_statements']} / "
            f"{f[f'baseline_{n}_statements']} |"
        )
    out += [
        "",
        f"Floor, statements per request independent of page size: {_floor(f['statements_flat'])}.",
        "",
    ]
    return out


def _inventory(f: dict) -> list[str]:
    sizes = f.get("sizes") or INVENTORY_SIZES
    out = [
        "Sync: `sync_inventory()` in the bench's process against a development cluster of that "
        "many H100s (its API server over HTTPS), with that many claims of one H100 and their "
        "pods made straight against it and allocated by its scheduler first: cold = into "
        f"empty mirror tables (median of {f['cold_reps']}, after one untimed sync that opens "
        f"the connection), warm = re-sync of an unchanged cluster (median of {f['warm_reps']})."
        " Baseline: the same rows written by psycopg COPY into a temp table + one `INSERT ... "
        "ON CONFLICT DO UPDATE` per table, no fetch, no diff. Statements counted with Django's "
        "execute_wrapper around the call.",
        "",
        "| devices | claims | sync cold s | upsert cold s | cold ratio | sync warm s "
        "| upsert warm s | warm ratio | statements cold / warm / upsert |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in sizes:
        out.append(
            f"| {n:,} | {f[f'd{n}_claims']:,} | {f[f'd{n}_sync_cold_s']} | "
            f"{f[f'd{n}_upsert_cold_s']} | {f[f'd{n}_cold_ratio']} | {f[f'd{n}_sync_warm_s']} | "
            f"{f[f'd{n}_upsert_warm_s']} | {f[f'd{n}_warm_ratio']} | "
            f"{f[f'd{n}_sync_cold_statements']} / {f[f'd{n}_sync_warm_statements']} / "
            f"{f[f'd{n}_upsert_statements']} |"
        )
    out += [
        "",
        "Endpoint: `GET /api/v1/operator/inventory` through gunicorn, one connection, "
        f"{f.get('endpoint_requests', 200)} requests per size.",
        "",
        "| devices | p50 ms | p99 ms | SQL statements |",
        "| --- | --- | --- | --- |",
    ]
    for n in sizes:
        out.append(
            f"| {n:,} | {f[f'd{n}_endpoint_p50_ms']} | {f[f'd{n}_endpoint_p99_ms']} | "
            f"{f[f'd{n}_endpoint_statements']} |"
        )
    smallest, largest = sizes[0], sizes[-1]
    cold, warm = f[f"d{largest}_cold_ratio"], f[f"d{largest}_warm_ratio"]
    endpoint = f["endpoint_ratio_largest_vs_smallest"]
    out += [
        "",
        "Floors:",
        "",
        f"- sync statements independent of size: {_floor(f['sync_statements_flat'])};",
        f"- sync ≤ 3× the raw bulk upsert at {largest:,} devices: warm {warm}× "
        f"{_floor(warm <= 3)}, cold {cold}× {_floor(cold <= 3)};",
        f"- endpoint at {largest:,} devices ≤ 2× its latency at {smallest:,}: "
        f"{endpoint}× {_floor(endpoint <= 2)}.",
        "",
    ]
    return out


def _burst_rows(f: dict) -> list[str]:
    return [
        "| | units/s | p50 time to Running s | p99 s | first request to last Running s |",
        "| --- | --- | --- | --- | --- |",
        f"| control plane | {f['control_plane_units_per_s']} | {f['control_plane_p50_s']} | "
        f"{f['control_plane_p99_s']} | {f['control_plane_span_s']} |",
        f"| direct | {f['direct_units_per_s']} | {f['direct_p50_s']} | {f['direct_p99_s']} | "
        f"{f['direct_span_s']} |",
        f"| ratio | {f['units_per_s_ratio']} | {f['p50_ratio']} | | |",
        "",
    ]


def _end_to_end(f: dict) -> list[str]:
    out = [
        f"{f['units']} units, `POST` (8 connections) to phase Running (polled in the database "
        f"every 0.1 s) on {f['cluster']}; {f['workers']}; {f['reconcile']}. Baseline, first "
        "and deleted before the control plane's: the same ResourceClaim + Pod per unit created "
        f"straight against the same API server with the official kubernetes client from "
        f"{f['direct_threads']} threads, no GPUUnit, no control plane, each timed to the watch "
        "event showing its pod Running.",
        "",
        *_burst_rows(f),
        f"Floor, units/s ≥ {BURST_FLOOR} of direct: "
        f"{_floor(f['units_per_s_ratio'] >= BURST_FLOOR)}.",
        "",
    ]
    return out


def _two_clusters(f: dict) -> list[str]:
    out = [
        f"{f['units']} units, `POST` (8 connections) naming no region, to phase Running, placed "
        f"over {f['clusters']} (the process's own and one in another region); {f['workers']}; "
        "one observer watching both; beat. Baseline, first and deleted before the control "
        "plane's: the same ResourceClaim + Pod per unit created straight against the same two "
        "API servers, half each, one thread per cluster.",
        "",
        *_burst_rows(f),
        f"Placed: {f['control_plane_units_own_cluster']} units in the own cluster, "
        f"{f['control_plane_units_other_cluster']} in the other. Floor, units/s ≥ "
        f"{BURST_FLOOR} of direct (as for one cluster): "
        f"{_floor(f['units_per_s_ratio'] >= BURST_FLOOR)}.",
        "",
    ]
    return out


def _time_to_running(f: dict) -> list[str]:
    out = [
        f"{f['units']} units created one after another through the API (gunicorn, 2 prefork "
        "workers, the observer, beat with its 30 s backstop) on "
        f"{f['cluster']}, each timed from its POST to the first poll (every {f['poll_s']:g} s) "
        "that sees it Running in the database. Baseline, first and deleted before the control "
        "plane's: the same claim and pod created straight against the same API server with the "
        "official client, timed to the first poll that reads the pod Running.",
        "",
        "| | p50 s | p99 s |",
        "| --- | --- | --- |",
        f"| control plane | {f['control_plane_p50_s']} | {f['control_plane_p99_s']} |",
        f"| direct | {f['direct_p50_s']} | {f['direct_p99_s']} |",
        f"| control plane's own share | {f['overhead_p50_s']} | {f['overhead_p99_s']} |",
        "",
        f"Floor, overhead p50 ≤ {OVERHEAD_FLOOR_S} s: "
        f"{_floor(f['overhead_p50_s'] <= OVERHEAD_FLOOR_S)}.",
        "",
    ]
    return out


def _observer_cost(f: dict) -> list[str]:
    sizes = f.get("sizes") or OBSERVER_SIZES
    out = [
        f"{' and '.join(f'{n:,}' for n in sizes)} units (GPUUnit, claim and pod each, as "
        "provisioning makes them, placed by the scheduler and running) on a development "
        f"cluster of {f['devices']:,} H100s, grown from one size to the next. One observed "
        "change: a unit's row and GPUUnit status put behind its pod, then the observer's batch "
        "(statements through Django's execute_wrapper, cluster calls from the kube client's "
        "counter). Backstop: the full `reconcile_units` pass in steady state, and the slowest "
        "of beat's ticks over one cycle (`reconcile_page`, RECONCILE_PAGE_SIZE units a tick). "
        "Memory: resident set of a gunicorn worker after 50 list requests, of the Celery "
        "worker processes, and of the observer holding every watched object (trimmed to the "
        "fields it reads).",
        "",
        "| units | statements per event | cluster calls per event | full pass s | "
        "slowest tick s | ticks per cycle | web MB | worker MB | observer MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for units in sizes:
        p = f"u{units}_"
        out.append(
            f"| {units:,} | {f[p + 'event_statements']} | {f[p + 'event_cluster_calls']:g} | "
            f"{f[p + 'backstop_reconcile_s']} | {f[p + 'backstop_tick_s']} | "
            f"{f[p + 'backstop_cycle_ticks']} | {f[p + 'web_rss_mb']} | "
            f"{f[p + 'worker_rss_mb']} | {f[p + 'observer_rss_mb']} |"
        )
    small, large = sizes[0], sizes[-1]
    tick, rss = f[f"u{large}_backstop_tick_s"], f[f"u{large}_observer_rss_mb"]
    out += [
        "",
        f"Floor, the cost of an event independent of the number of units: "
        f"{_floor(f['event_cost_flat'])}. The full pass is O(units) "
        f"({f['backstop_ratio']}× from {small:,} to {large:,}); beat runs a tick of "
        f"{f['reconcile_page_size']} units every 30 s instead, so every unit is visited once "
        "per cycle and a tick's work follows the page, not the fleet.",
        "",
        f"Ceilings at {large:,} units: slowest backstop tick ≤ {TICK_CEILING_S} s: {tick} s "
        f"{_floor(tick <= TICK_CEILING_S)}; observer resident set ≤ "
        f"{OBSERVER_RSS_CEILING_MB} MB: {rss} MB {_floor(rss <= OBSERVER_RSS_CEILING_MB)}.",
        "",
    ]
    return out


_LEDGER_READERS = (
    ("usage_unit", "`usage` this month, by unit"),
    ("usage_package", "`usage` this month, by package"),
    ("usage_day", "`usage` this month, by day"),
    ("statement", "`statement` of this month"),
    ("tenant_costs", "`tenant_costs`"),
    ("costs_by_tenant", "`costs_by_tenant`"),
    ("budget_of", "`budget_of`"),
    ("cost_to_date", "`cost_to_date` of the fleet"),
)
_EXPORT_LABELS = {
    "focus-csv": "focus-csv",
    "cloudevents": "cloudevents",
    "stripe": "stripe",
    "job-focus-csv": "focus-csv as the worker makes it (rendered, then stored in parts)",
}


def _ledger(f: dict) -> list[str]:
    sizes = f.get("sizes") or LEDGER_SIZES
    labels = {n: size_label(n) for n in sizes}
    smallest, larger, largest = sizes[0], sizes[1:], sizes[-1]
    loads = "; ".join(
        f"{labels[n]}: {f[f'r{n}_load_s']} s to write, {f[f'r{n}_rebuild_s']} s to rebuild "
        f"{f[f'r{n}_rollup_rows']:,} rollup rows"
        for n in sizes
    )
    hours = ", ".join(
        f"{n // f['units']:,} hour{'s' if n // f['units'] != 1 else ''}" for n in sizes
    )
    out = [
        f"One tenant, {f['units']:,} units of {f['packages']} packages, one ledger row per unit "
        f"and UTC hour back from the current hour: {hours}. No cluster. Each size in its own "
        "database, rows written oldest first by one `INSERT ... SELECT`, rollups by "
        f"`billing.rollups.rebuild()`, then `VACUUM ANALYZE` ({loads}).",
        "",
        "Readers (billing.selectors, billing.statements, billing.budgets) called in this "
        f"process with now = {f['now']} and this month from {f['month_start']} (the API's "
        f"default period), warm; {f['reader_rounds']} rounds alternating between the "
        f"databases, {f['reader_calls']} timed calls per reader and round after one untimed, "
        "median. The endpoint: `GET /api/v1/usage?groupBy=unit` (default period) through "
        f"{f['server']}, one server per database, one connection, {f['endpoint_rounds']} "
        f"rounds of {f['endpoint_requests']} requests alternating, p50. Every reader's answer "
        f"is checked against sums of the ledger rows. Figure: time at each size over time at "
        f"{labels[smallest]}.",
        "",
        f"| reader | {' | '.join(f'{labels[n]} ms' for n in sizes)} | "
        f"{' | '.join(f'{labels[n]} ÷ {labels[smallest]}' for n in larger)} | SQL statements "
        "| floor |",
        f"| --- | {' | '.join('---' for _ in sizes)} | {' | '.join('---' for _ in larger)} "
        "| --- | --- |",
    ]
    for name, label in [*_LEDGER_READERS, ("endpoint", "`GET /api/v1/usage?groupBy=unit`")]:
        suffix = "_p50_ms" if name == "endpoint" else "_ms"
        ratios = [f[f"{name}_ratio_{labels[n].lower()}"] for n in larger]
        statements = " / ".join(str(f[f"r{n}_{name}_statements"]) for n in sizes)
        out.append(
            f"| {label} | {' | '.join(str(f[f'r{n}_{name}{suffix}']) for n in sizes)} "
            f"| {' | '.join(str(r) for r in ratios)} | {statements} | "
            f"≤ {LEDGER_READER_CEILING}: {_floor(ratios[-1] <= LEDGER_READER_CEILING)} |"
        )
    out += [""]
    if f.get("export_available"):
        reps = " and ".join(f"{f[f'r{n}_export_reps']} at {labels[n]}" for n in larger)
        out += [
            "Exports: `billing.exporting.copy_to(format, ...)` of every row into a temp file, "
            "and a FOCUS export as a worker makes one (`billing.jobs.run_export`), against the "
            "baseline, a plain `COPY (SELECT * FROM billing_usagerecord WHERE start "
            ">= ... AND start < ... ORDER BY start, id) TO STDOUT (FORMAT csv)` of the same rows "
            "read with psycopg's `cursor.copy()` into a temp file; the two in turn, median "
            f"({reps} runs). Figure: export rows/s over COPY rows/s.",
            "",
            f"| format | {' | '.join(f'{labels[n]} rows/s | {labels[n]} ratio' for n in larger)} "
            f"| {labels[largest]} s | {labels[largest]} MB | floor |",
            f"| --- | {' | '.join('--- | ---' for _ in larger)} | --- | --- | --- |",
        ]
        big = f"r{largest}_export_"
        out.append(
            "| COPY (baseline) | "
            + " | ".join(f"{f[f'r{n}_export_copy_rows_per_s']:,} | 1" for n in larger)
            + f" | {f[big + 'copy_s']} | {round(f[big + 'copy_bytes'] / 1e6, 1)} | |"
        )
        for fmt, label in _EXPORT_LABELS.items():
            key = fmt.replace("-", "_")
            measured = [f"r{n}_export_{key}_" for n in larger]
            if any(p + "ratio" not in f for p in measured):
                out.append(f"| {label} | failed | | | | | | **not met** |")
                continue
            worst = min(f[p + "ratio"] for p in measured)
            out.append(
                f"| {label} | "
                + " | ".join(f"{f[p + 'rows_per_s']:,} | {f[p + 'ratio']}" for p in measured)
                + f" | {f[big + key + '_s']} | {round(f[big + key + '_bytes'] / 1e6, 1)} | "
                f"≥ {LEDGER_EXPORT_FLOOR}: {_floor(worst >= LEDGER_EXPORT_FLOOR)} |"
            )
        out += [""]
    else:
        out += ["Exports: `billing.exporting` was not there when this ran; not measured.", ""]
    top = labels[largest].lower()
    failing = [
        label for name, label in _LEDGER_READERS if f[f"{name}_ratio_{top}"] > LEDGER_READER_CEILING
    ]
    out += [
        "Floors:",
        "",
        f"- readers at {labels[largest]} ÷ {labels[smallest]} rows ≤ {LEDGER_READER_CEILING}: "
        f"{_floor(f['readers_met'])}"
        + (f" ({', '.join(failing)} above)" if failing else "")
        + f"; the endpoint {f[f'endpoint_ratio_{top}']}× {_floor(f['endpoint_met'])};",
    ]
    if f.get("export_available"):
        out.append(
            f"- every export ≥ {LEDGER_EXPORT_FLOOR} of COPY at "
            f"{' and '.join(labels[n] for n in larger)} rows: "
            f"{_floor(f.get('exports_met', False))};"
        )
    problems = f.get("problems") or []
    out.append(
        "- readers' answers equal the ledger's sums: "
        + (_floor(True) if not problems else "**no**: " + "; ".join(problems))
        + ".",
    )
    return [*out, ""]


# name: (title, what it measures against what, the figures' section)
SECTIONS: dict[str, tuple[str, str, Callable[[dict], list[str]]]] = {
    "api_create": (
        "1-2. Create API and replay",
        "`POST /api/v1/gpu-units` (new operationIDs over 8 tenants and over one, and replays) "
        "against a bare Django view doing one INSERT through the same gunicorn; no cluster.",
        _create,
    ),
    "api_list": (
        "3. List",
        "`GET /api/v1/gpu-units` at 10,000 units in the tenant, first page and a deep one, "
        "against one raw `SELECT ... LIMIT` rendered as JSON; no cluster.",
        _list,
    ),
    "inventory": (
        "4-5. Inventory sync and endpoint",
        "`sync_inventory()` against development clusters of 10, 1,000 and 10,000 H100s (2, 200 "
        "and 2,000 claims allocated by the scheduler), against a raw COPY + upsert of the "
        "same rows; the operator inventory endpoint at each size against itself at 10.",
        _inventory,
    ),
    "end_to_end": (
        "6. End to end: a burst of units",
        "500 units from `POST` to Running on a development cluster of 63 nodes × 8 H100, "
        "against the same ResourceClaim + Pod per unit created straight against the same API "
        "server (the direct baseline).",
        _end_to_end,
    ),
    "time_to_running": (
        "6a. Time to Running on an idle stack",
        "24 units one after another on a development cluster of 3 nodes × 8 H100, each from "
        "its `POST` to Running in the database, against its claim and pod created straight "
        "against the same API server and timed to the pod Running.",
        _time_to_running,
    ),
    "observer_cost": (
        "6b. Observing as the fleet grows",
        "At 10 and 2,000 running units on a development cluster of 2,000 H100s: statements "
        "and cluster calls per observed change, the backstop's pass and ticks, and the "
        "processes' resident memory.",
        _observer_cost,
    ),
    "two_clusters": (
        "6c. The burst over two clusters",
        "500 units naming no region over two development clusters of 32 nodes × 8 H100, "
        "against the same claims and pods created straight against the same two API servers.",
        _two_clusters,
    ),
    "ledger": (
        "8. Ledger readers and exports at 1k, 10k and 1M rows",
        "The billing readers and the usage endpoint at 10k and 1M ledger rows against "
        "themselves at 1k; exports against a plain `COPY` of the same rows; no cluster.",
        _ledger,
    ),
}


def render(results: dict[str, dict], kept: str | None = None) -> str:
    """The document: every benchmark's section (its figures when `results` has them), the
    findings, the JSON lines, then `kept` as it is (by default what the document keeps now)."""
    if kept is None:
        kept = kept_part(DOCUMENT.read_text()) if DOCUMENT.exists() else ""
    out = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (bench/run.py, then bench/report.py) on the machine it ran "
        "on: real PostgreSQL and Redis (embedded, from `python -m devstack exec`), gunicorn, "
        "Celery, and development clusters (devstack/cluster.py: the real etcd, kube-apiserver "
        "1.36, kube-controller-manager and kube-scheduler, KWOK nodes whose pods run no "
        "containers and are reported Running as soon as they are bound, the development DRA "
        "driver's slices), all on loopback. Every figure is a ratio to a baseline measured in "
        "the same run; absolute times are only context. Each script prints one JSON line "
        "(below) and runs alone with the command given; with `BENCH_SMALL=1` it runs at sizes "
        "that only check it works.",
        "",
        'The "direct" baseline of the cluster benchmarks is the same ResourceClaim and Pod a '
        "unit gets (runtime/manifests.py, without the GPUUnit owner) created straight against "
        "the same API server with the official kubernetes client: what the cluster itself "
        "does for a unit with no control plane in front, which the product's figures are "
        "divided by. A cluster's processes (etcd, the API server, scheduler, controller-manager, "
        "KWOK and devstack's node agent, which writes each started container's log) share the "
        "machine's cores with the product's, in both halves alike.",
        "",
        "Server settings: production mode (`DJANGO_DEBUG=0`, `bench/settings.py` = the "
        "product's settings + the baseline views + a statement-counting middleware), "
        "`API_THROTTLE_RATE=100000000/min` so the limiter runs but never refuses. A tenant's "
        "namespace is made (as provisioning makes it) before its units are timed.",
        "",
    ]
    for name, (title, summary, section) in SECTIONS.items():
        figures = results.get(name)
        out += _header(name, title, figures)
        out += section(figures) if figures is not None else [summary, ""]
    if FINDINGS.exists():
        out += [FINDINGS.read_text().rstrip(), ""]
    out += ["## JSON lines", "", "```"]
    out += [json.dumps(results[name]) for name in SECTIONS if name in results]
    out += ["```", ""]
    if kept:
        out += [KEPT, "", kept.strip("\n"), ""]
    return "\n".join(out)


def kept_part(document: str) -> str:
    """What the document holds after KEPT (earlier runs' figures), as it is."""
    _above, marker, below = document.partition(KEPT)
    return below if marker else ""


def write(results: dict[str, dict]) -> None:
    DOCUMENT.write_text(render(results))


if __name__ == "__main__":
    write(load(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS))
