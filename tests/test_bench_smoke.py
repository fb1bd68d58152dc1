"""Every benchmark of `make bench` runs once at its smallest size under `make test`
(BENCH_SMALL=1: sizes that only check it works; no figure is asserted, the machine is busy with
the rest of the suite), so a change that breaks one fails CI instead of the next `make bench`
(issue 42: two had rotted unseen). Each runs as `make bench` runs it, in its own process, with
its own Redis (the suite's Redis databases are its workers' brokers) and its own development
clusters; its databases are bench_<name> on the suite's PostgreSQL server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import run

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parent.parent
# What this test process set for itself or its session fixtures; a benchmark sets its own.
NOT_PASSED = {"REDIS_URL", "KUBECONFIG", "CLUSTER_CREDENTIALS_DIR", "DJANGO_SETTINGS_MODULE"}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", run.SCRIPTS)
def test_the_benchmark_runs_at_its_smallest_size(name: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED}
    env["BENCH_SMALL"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "devstack", "exec", "--", sys.executable, "-m", f"bench.{name}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert result.returncode == 0, f"bench.{name} failed:\n{result.stderr[-6000:]}"
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert (figures["bench"], figures["small"]) == (name, True)
