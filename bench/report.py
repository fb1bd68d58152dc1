# ruff: noqa: RUF001 - the report uses typographic multiplication signs.
"""Writes docs/benchmarks.md from the benchmarks' JSON lines (test-artifacts/benchmarks.jsonl)
and the hand-kept record of what was profiled and changed (bench/findings.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.harness import RESULTS, ROOT

DOCUMENT = ROOT / "docs" / "benchmarks.md"
FINDINGS = ROOT / "bench" / "findings.md"
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


def load(path: Path) -> dict[str, dict]:
    if not path.exists():
        return {}
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {figures["bench"]: figures for figures in lines}


def _floor(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _header(figures: dict, title: str) -> list[str]:
    return [
        f"## {title}",
        "",
        f"Command: {COMMAND.format(name=figures['bench'])} "
        f"(ran {figures.get('ran_at', '?')}, {figures.get('seconds', '?')} s).",
        "",
    ]


def _create(f: dict) -> list[str]:
    rows = [
        ("POST, new operationID, 8 tenants", "create"),
        ("POST, new operationID, 1 tenant", "create_one_tenant"),
        ("POST, replay of one operationID", "replay"),
    ]
    out = _header(f, "1-2. Create API and replay")
    out += [
        f"{f['server']}; {f['concurrency']} client connections (http.client, one thread each, "
        f"keep-alive) on loopback; {f['rounds']} rounds of {f['seconds_per_round']:g} s per "
        "kind, alternating, median req/s. Baseline: `POST /bench/insert`, a bare Django view "
        "doing one INSERT (bench/views.py), same server, same connections. Statements per "
        f"request: {f['statement_count']}.",
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
    out = _header(f, "3. List")
    out += [
        f"`GET /api/v1/gpu-units` with {f['units_in_tenant']:,} units in the tenant, one "
        f"connection, {f['requests']} requests per kind (rounds alternating), p50 latency. "
        "Baseline: `GET /bench/units`, one raw `SELECT <the same columns> ... ORDER BY id DESC "
        'LIMIT n` rendered with json.dumps. "deep" is a page 5,000 units in, by cursor.',
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
    out = _header(f, "4-5. Inventory sync and endpoint")
    out += [
        "Sync: `sync_inventory()` against the simulated cluster (another process, over HTTP): "
        f"cold = into empty mirror tables (median of {f['cold_reps']}), warm = re-sync of an "
        f"unchanged cluster (median of {f['warm_reps']}). Baseline: the same rows written by "
        "psycopg COPY into a temp table + one `INSERT ... ON CONFLICT DO UPDATE` per table, no "
        "fetch, no diff. Statements counted with Django's execute_wrapper around the call.",
        "",
        "| devices | claims | sync cold s | upsert cold s | cold ratio | sync warm s "
        "| upsert warm s | warm ratio | statements cold / warm / upsert |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    sizes = (10, 1000, 10000)
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
        "200 requests per size.",
        "",
        "| devices | p50 ms | p99 ms | SQL statements |",
        "| --- | --- | --- | --- |",
    ]
    for n in sizes:
        out.append(
            f"| {n:,} | {f[f'd{n}_endpoint_p50_ms']} | {f[f'd{n}_endpoint_p99_ms']} | "
            f"{f[f'd{n}_endpoint_statements']} |"
        )
    cold, warm = f["d10000_cold_ratio"], f["d10000_warm_ratio"]
    out += [
        "",
        "Floors:",
        "",
        f"- sync statements independent of size: {_floor(f['sync_statements_flat'])};",
        f"- sync ≤ 3× the raw bulk upsert at 10,000 devices: warm {warm}× "
        f"{_floor(warm <= 3)}, cold {cold}× {_floor(cold <= 3)};",
        "- endpoint at 10,000 devices ≤ 2× its latency at 10: "
        f"{f['endpoint_ratio_10000_vs_10']}× {_floor(f['endpoint_ratio_10000_vs_10'] <= 2)}.",
        "",
    ]
    return out


def _end_to_end(f: dict) -> list[str]:
    out = _header(f, "6. End to end: a burst of 500 units")
    out += [
        f"{f['units']} units, `POST` (8 connections) to phase Running; {f['workers']}; "
        f"{f['reconcile']}. Baseline: the same ResourceClaim + Pod per unit created directly "
        f"with the official kubernetes client from {f['direct_threads']} threads, no GPUUnit, "
        "no control plane. Each against a fresh simulated cluster of 63 nodes × 8 H100.",
        "",
        "| | units/s | p50 time to Running s | p99 s | first request to last Running s |",
        "| --- | --- | --- | --- | --- |",
        f"| control plane | {f['control_plane_units_per_s']} | {f['control_plane_p50_s']} | "
        f"{f['control_plane_p99_s']} | {f['control_plane_span_s']} |",
        f"| direct | {f['direct_units_per_s']} | {f['direct_p50_s']} | {f['direct_p99_s']} | "
        f"{f['direct_span_s']} |",
        f"| ratio | {f['units_per_s_ratio']} | {f['p50_ratio']} | | |",
        "",
        f"Floor, units/s ≥ {BURST_FLOOR} of direct: "
        f"{_floor(f['units_per_s_ratio'] >= BURST_FLOOR)}.",
        "",
    ]
    return out


def _two_clusters(f: dict) -> list[str]:
    out = _header(f, "6c. The burst over two clusters")
    out += [
        f"{f['units']} units, `POST` (8 connections) naming no region, to phase Running, placed "
        f"over {f['clusters']} (the process's own and one in another region); {f['workers']}; "
        "one observer watching both; beat. Baseline: the same ResourceClaim + Pod per unit "
        f"created directly on both clusters, half each, from {f['direct_threads']} threads.",
        "",
        "| | units/s | p50 time to Running s | p99 s | first request to last Running s |",
        "| --- | --- | --- | --- | --- |",
        f"| control plane | {f['control_plane_units_per_s']} | {f['control_plane_p50_s']} | "
        f"{f['control_plane_p99_s']} | {f['control_plane_span_s']} |",
        f"| direct | {f['direct_units_per_s']} | {f['direct_p50_s']} | {f['direct_p99_s']} | "
        f"{f['direct_span_s']} |",
        f"| ratio | {f['units_per_s_ratio']} | {f['p50_ratio']} | | |",
        "",
        f"Placed: {f['control_plane_units_own_cluster']} units in the own cluster, "
        f"{f['control_plane_units_other_cluster']} in the other. Floor, units/s ≥ "
        f"{BURST_FLOOR} of direct (as for one cluster): "
        f"{_floor(f['units_per_s_ratio'] >= BURST_FLOOR)}.",
        "",
    ]
    return out


def _time_to_running(f: dict) -> list[str]:
    out = _header(f, "6a. Time to Running on an idle stack")
    out += [
        f"{f['units']} units created one after another through the API (gunicorn, 2 prefork "
        "workers, the observer, beat with its 30 s backstop), each timed from its POST to the "
        f"first poll (every {f['poll_s']:g} s) that sees it Running in the database. Baseline: "
        "the same claim and pod created directly with the official client, timed to the pod "
        "Running. Fresh simulated cluster of 3 nodes × 8 H100 for each.",
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
    out = _header(f, "6b. Observing as the fleet grows")
    out += [
        f"10 and 10,000 units (GPUUnit, claim and pod each, running) on a simulated cluster of "
        f"{f['devices']:,} H100s. One observed change: a unit's row and GPUUnit status put "
        "behind its pod, then the observer's batch (statements through Django's "
        "execute_wrapper, cluster calls from the kube client's counter). Backstop: the full "
        "`reconcile_units` pass in steady state, and the slowest of beat's ticks over one "
        "cycle (`reconcile_page`, RECONCILE_PAGE_SIZE units a tick). Memory: resident set of a "
        "gunicorn worker after 50 list requests, of the Celery worker processes, and of the "
        "observer holding every watched object (trimmed to the fields it reads).",
        "",
        "| units | statements per event | cluster calls per event | full pass s | "
        "slowest tick s | ticks per cycle | web MB | worker MB | observer MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for units in (10, 10_000):
        p = f"u{units}_"
        out.append(
            f"| {units:,} | {f[p + 'event_statements']} | {f[p + 'event_cluster_calls']:g} | "
            f"{f[p + 'backstop_reconcile_s']} | {f.get(p + 'backstop_tick_s', '')} | "
            f"{f.get(p + 'backstop_cycle_ticks', '')} | {f[p + 'web_rss_mb']} | "
            f"{f[p + 'worker_rss_mb']} | {f[p + 'observer_rss_mb']} |"
        )
    out += [
        "",
        f"Floor, the cost of an event independent of the number of units: "
        f"{_floor(f['event_cost_flat'])}. The full pass is O(units) "
        f"({f['backstop_ratio']}× from 10 to 10,000); beat runs a tick of "
        f"{f.get('reconcile_page_size', '?')} units every 30 s instead, so every unit is "
        "visited once per cycle and a tick's work follows the page, not the fleet.",
        "",
    ]
    large = "u10000_"
    if large + "backstop_tick_s" in f:
        tick, rss = f[large + "backstop_tick_s"], f[large + "observer_rss_mb"]
        out += [
            f"Ceilings at 10,000 units: slowest backstop tick ≤ {TICK_CEILING_S} s: {tick} s "
            f"{_floor(tick <= TICK_CEILING_S)}; observer resident set ≤ "
            f"{OBSERVER_RSS_CEILING_MB} MB: {rss} MB {_floor(rss <= OBSERVER_RSS_CEILING_MB)}.",
            "",
        ]
    return out


def _scheduler(f: dict) -> list[str]:
    out = _header(f, "7. Simulated scheduler pass")
    out += [
        "One pass placing every pending pod (fresh store each repetition): 10 nodes × 8 GPUs "
        f"with 50 claims against 1,000 nodes × 8 GPUs with {f['claims']:,} claims.",
        "",
        "| 10 nodes s | 1,000 nodes s | ratio |",
        "| --- | --- | --- |",
        f"| {f['nodes_10_s']} | {f['nodes_1000_s']} | {f['ratio']} |",
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
_LEDGER_SIZES = ((1_000, "1k"), (10_000, "10k"), (1_000_000, "1M"))


def _ledger(f: dict) -> list[str]:
    out = _header(f, "8. Ledger readers and exports at 1k, 10k and 1M rows")
    loads = "; ".join(
        f"{label}: {f[f'r{n}_load_s']} s to write, {f[f'r{n}_rebuild_s']} s to rebuild "
        f"{f[f'r{n}_rollup_rows']:,} rollup rows"
        for n, label in _LEDGER_SIZES
    )
    out += [
        f"One tenant, {f['units']:,} units of {f['packages']} packages, one ledger row per unit "
        "and UTC hour back from the current hour: 1 hour, 10 hours and 1,000 hours (about 42 "
        "days, so three UTC months). Each size in its own database, rows written oldest first "
        "by one `INSERT ... SELECT`, rollups by `billing.rollups.rebuild()`, then `VACUUM "
        f"ANALYZE` ({loads}).",
        "",
        "Readers (billing.selectors, billing.statements, billing.budgets) called in this "
        f"process with now = {f['now']} and this month from {f['month_start']} (the API's "
        f"default period), warm; {f['reader_rounds']} rounds alternating between the three "
        f"databases, {f['reader_calls']} timed calls per reader and round after one untimed, "
        "median. The endpoint: `GET /api/v1/usage?groupBy=unit` (default period) through "
        f"{f['server']}, one server per database, one connection, {f['endpoint_rounds']} "
        f"rounds of {f['endpoint_requests']} requests alternating, p50. Every reader's answer "
        "is checked against sums of the ledger rows. Figure: time at 10k and 1M rows over time "
        "at 1k.",
        "",
        "| reader | 1k ms | 10k ms | 1M ms | 10k ÷ 1k | 1M ÷ 1k | SQL statements | floor |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, label in [*_LEDGER_READERS, ("endpoint", "`GET /api/v1/usage?groupBy=unit`")]:
        suffix = "_p50_ms" if name == "endpoint" else "_ms"
        ratio = f[f"{name}_ratio_1m"]
        statements = " / ".join(str(f[f"r{n}_{name}_statements"]) for n, _ in _LEDGER_SIZES)
        out.append(
            f"| {label} | {' | '.join(str(f[f'r{n}_{name}{suffix}']) for n, _ in _LEDGER_SIZES)} "
            f"| {f[f'{name}_ratio_10k']} | {ratio} | {statements} | "
            f"≤ {LEDGER_READER_CEILING}: {_floor(ratio <= LEDGER_READER_CEILING)} |"
        )
    out += [""]
    if f.get("export_available"):
        out += [
            "Exports: `billing.exporting.copy_to(format, ...)` of every row into a temp file, "
            "and a FOCUS export as a worker makes one (`billing.jobs.run_export`), against the "
            "baseline, a plain `COPY (SELECT * FROM billing_usagerecord WHERE start "
            ">= ... AND start < ... ORDER BY start, id) TO STDOUT (FORMAT csv)` of the same rows "
            "read with psycopg's `cursor.copy()` into a temp file; the two in turn, median "
            f"({f['r10000_export_reps']} runs at 10k, {f['r1000000_export_reps']} at 1M). "
            "Figure: export rows/s over COPY rows/s.",
            "",
            "| format | 10k rows/s | 10k ratio | 1M rows/s | 1M ratio | 1M s | 1M MB | floor |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        big = "r1000000_export_"
        out.append(
            f"| COPY (baseline) | {f['r10000_export_copy_rows_per_s']:,} | 1 | "
            f"{f[big + 'copy_rows_per_s']:,} | 1 | {f[big + 'copy_s']} | "
            f"{round(f[big + 'copy_bytes'] / 1e6, 1)} | |"
        )
        labels = {
            "focus-csv": "focus-csv",
            "cloudevents": "cloudevents",
            "stripe": "stripe",
            "job-focus-csv": "focus-csv as the worker makes it (rendered, then stored in parts)",
        }
        for fmt, label in labels.items():
            key = fmt.replace("-", "_")
            small, large = f"r10000_export_{key}_", f"{big}{key}_"
            if large + "ratio" not in f or small + "ratio" not in f:
                if fmt != "job-focus-csv":  # not measured before the job existed
                    out.append(f"| {label} | failed | | | | | | **not met** |")
                continue
            worst = min(f[small + "ratio"], f[large + "ratio"])
            out.append(
                f"| {label} | {f[small + 'rows_per_s']:,} | {f[small + 'ratio']} | "
                f"{f[large + 'rows_per_s']:,} | {f[large + 'ratio']} | {f[large + 's']} | "
                f"{round(f[large + 'bytes'] / 1e6, 1)} | "
                f"≥ {LEDGER_EXPORT_FLOOR}: {_floor(worst >= LEDGER_EXPORT_FLOOR)} |"
            )
        out += [""]
    else:
        out += ["Exports: `billing.exporting` was not there when this ran; not measured.", ""]
    failing = [
        label for name, label in _LEDGER_READERS if f[f"{name}_ratio_1m"] > LEDGER_READER_CEILING
    ]
    out += [
        "Floors:",
        "",
        f"- readers at 1M ÷ 1k rows ≤ {LEDGER_READER_CEILING}: {_floor(f['readers_met'])}"
        + (f" ({', '.join(failing)} above)" if failing else "")
        + f"; the endpoint {f['endpoint_ratio_1m']}× {_floor(f['endpoint_met'])};",
    ]
    if f.get("export_available"):
        out.append(
            f"- every export ≥ {LEDGER_EXPORT_FLOOR} of COPY at 10k and 1M rows: "
            f"{_floor(f.get('exports_met', False))};"
        )
    problems = f.get("problems") or []
    out.append(
        "- readers' answers equal the ledger's sums: "
        + (_floor(True) if not problems else "**no**: " + "; ".join(problems))
        + ".",
    )
    return [*out, ""]


SECTIONS = {
    "api_create": _create,
    "api_list": _list,
    "inventory": _inventory,
    "end_to_end": _end_to_end,
    "time_to_running": _time_to_running,
    "observer_cost": _observer_cost,
    "two_clusters": _two_clusters,
    "sim_scheduler": _scheduler,
    "ledger": _ledger,
}


def render(results: dict[str, dict]) -> str:
    out = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (bench/run.py, then bench/report.py) on the machine it ran "
        "on: real PostgreSQL and Redis (embedded, from `python -m devstack exec`), gunicorn, "
        "Celery and the simulated cluster, all on loopback. Every figure is a ratio to a "
        "baseline measured in the same run; absolute times are only context. Each script "
        "prints one JSON line (bottom of this page) and runs alone with the command given.",
        "",
        "Server settings: production mode (`DJANGO_DEBUG=0`, `bench/settings.py` = the "
        "product's settings + the baseline views + a statement-counting middleware), "
        "`API_THROTTLE_RATE=100000000/min` so the limiter runs but never refuses. The "
        "simulated cluster runs in its own process (`bench/simserver.py`, claims "
        "pre-allocated where a bench needs them).",
        "",
    ]
    for name, section in SECTIONS.items():
        if name in results:
            out += section(results[name])
    if FINDINGS.exists():
        out += [FINDINGS.read_text().rstrip(), ""]
    out += ["## JSON lines", "", "```"]
    out += [json.dumps(results[name]) for name in SECTIONS if name in results]
    out += ["```", ""]
    return "\n".join(out)


def write(results: dict[str, dict]) -> None:
    DOCUMENT.write_text(render(results))


if __name__ == "__main__":
    write(load(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS))
