"""`make bench`: run every benchmark in its own process, keep each one's JSON line in
test-artifacts/benchmarks.jsonl, then write docs/benchmarks.md (bench/report.py).
`python -m bench.run NAME...` runs only those; BENCH_SMALL=1 runs each small (bench/harness.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

from bench import harness, report

SCRIPTS = (
    "api_create",
    "api_list",
    "inventory",
    "end_to_end",
    "two_clusters",
    "time_to_running",
    "observer_cost",
    "ledger",
)
# Per script. The longest at full size is bench.observer_cost: 10,000 units' objects made on a
# development cluster and placed by its scheduler before anything is measured.
TIMEOUT_SECONDS = 3600


def main() -> int:
    only = sys.argv[1:] or list(SCRIPTS)
    harness.RESULTS.parent.mkdir(exist_ok=True)
    lines = []
    for name in only:
        harness.log(f"running bench.{name}")
        started = time.monotonic()
        completed = subprocess.run(
            [sys.executable, "-m", f"bench.{name}"],
            cwd=harness.ROOT,
            env=dict(os.environ),
            stdout=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT_SECONDS,
        )
        output = [line for line in completed.stdout.splitlines() if line.strip()]
        if completed.returncode != 0 or not output:
            harness.log(f"bench.{name} failed with exit code {completed.returncode}")
            return completed.returncode or 1
        figures = json.loads(output[-1])
        figures["seconds"] = round(time.monotonic() - started, 1)
        figures["ran_at"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        print(json.dumps(figures), flush=True)
        lines.append(figures)
    previous = report.load(harness.RESULTS)
    previous.update({figures["bench"]: figures for figures in lines})
    harness.RESULTS.write_text("".join(json.dumps(f) + "\n" for f in previous.values()))
    report.write(previous)
    harness.log(f"wrote {report.DOCUMENT.relative_to(harness.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
