"""The README's and docs/' commands work as printed against a running `make run`: every ```sh
block outside the sections that need a real cluster or Docker is run by bash with the stack's ports
and data folder in place of 8000-8002 and .devdata (curl fails on an HTTP error, so an error
envelope is a failure, not output). Then the stack is stopped the way a process manager does,
SIGTERM to its whole process group, and nothing it started may outlive it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from devstack.services import free_port_block
from tests.test_make_run import stop_whatever_is_left, wait_until_up

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# The pages whose blocks run, in this order after the README's (a page's blocks may use what an
# earlier page made: units, webhooks). Every page of docs/ with a ```sh block is listed.
DOCS = [
    ROOT / "docs" / name
    for name in (
        "development.md",
        "api.md",
        "billing.md",
        "webhooks-and-audit.md",
        "clusters.md",
        "development-clusters.md",
        "operations.md",
        "settings.md",
    )
]

# Sections whose commands need what this machine does not have; each says why.
NOT_HERE = {
    "Running on a real cluster": "a real Kubernetes cluster, a registry and Docker",
    "Docker Compose (single machine)": "a Docker engine",
}
# `make run` and `make test` themselves: this test runs inside both.
THE_TWO_COMMANDS = re.compile(r"^make (run|test)\b", re.MULTILINE)
# Run `curl` so that an HTTP error fails the block but its body is still printed; except
# through the development gateway (`--connect-to`), whose answer for a unit is an HTTP error by
# design (503: no process serves it), a page the test reads instead.
PRELUDE = (
    'curl() { case " $* " in\n'
    '  *" --connect-to "*) command curl --max-time 20 "$@" ;;\n'
    '  *) command curl --fail-with-body --max-time 20 "$@" ;;\n'
    "esac; }\n"
)
GATEWAY_PAGE = "No process serves this unit in the development cluster"


def readme_blocks() -> list[tuple[str, str]]:
    """(section, block) for every ```sh block of the README and then of DOCS, by its `## `
    section."""
    return [found for page in (README, *DOCS) for found in page_blocks(page)]


def page_blocks(page: Path) -> list[tuple[str, str]]:
    section, blocks, block = "", [], None
    for line in page.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif block is None and line.strip() == "```sh":
            block = []
        elif block is not None and line.strip() == "```":
            blocks.append((section, "\n".join(block)))
            block = None
        elif block is not None:
            block.append(line)
    return blocks


def test_the_readme_blocks_are_found_and_every_skipped_section_exists():
    sections = {section for section, _ in readme_blocks()}
    assert set(NOT_HERE) <= sections
    assert len(runnable_blocks()) >= 3
    with_blocks = {page for page in (ROOT / "docs").glob("*.md") if page_blocks(page)}
    assert with_blocks <= set(DOCS), f"add to DOCS: {sorted(with_blocks - set(DOCS))}"


def test_the_readme_is_read_in_five_minutes():
    # Issue 42: what it is, the two commands, a first unit, the layout, one test, the index.
    assert len(README.read_bytes()) <= 15 * 1024
    text = README.read_text()
    for page in DOCS:
        assert f"(docs/{page.name})" in text, f"the README's index lacks {page.name}"


def runnable_blocks() -> list[tuple[str, str]]:
    return [
        (section, block)
        for section, block in readme_blocks()
        if section not in NOT_HERE and not THE_TWO_COMMANDS.search(block)
    ]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    data = tmp_path_factory.mktemp("readme") / "devdata"
    # The web port, the worker's and observer's /metrics, the two clusters' gateways.
    port, log = free_port_block(5), data.parent / "run.log"
    env = {
        k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "KUBECONFIG"}
    }
    env.update(PORT=str(port), DATA=str(data))
    process = subprocess.Popen(
        ["make", "--no-print-directory", "run"],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as under a process manager
    )
    try:
        wait_until_up(f"http://127.0.0.1:{port}", process, log)
        deadline = time.monotonic() + 90
        while "Press Ctrl-C" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        yield {"process": process, "port": port, "data": data, "log": log, "env": env}
    finally:
        stop_whatever_is_left(process)


def run_block(stack, block: str) -> subprocess.CompletedProcess:
    script = block.replace(".devdata", str(stack["data"]))
    # Web, the worker's and the observer's /metrics, then the two development gateways.
    for offset in (0, 1, 2, 3, 4):
        script = script.replace(f"127.0.0.1:{8000 + offset}", f"127.0.0.1:{stack['port'] + offset}")
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", PRELUDE + script],
        cwd=ROOT,
        env={**stack["env"], "DATA": str(stack["data"]), "PATH": _path()},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _path() -> str:
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.mark.skipif(not shutil.which("kubectl"), reason="the README's kubectl needs kubectl")
# Every block in turn, each waiting for what it shows (units Running, deliveries): about two
# minutes on a quiet machine, over the suite's 300 s cap on a loaded one (a fresh clone's run
# beside other work took 300 s and was still going).
@pytest.mark.timeout(900)
def test_every_readme_command_works_as_printed(stack):
    ran = []
    for section, block in runnable_blocks():
        result = run_block(stack, block)
        assert result.returncode == 0, (
            f"README block in {section!r} failed:\n{block}\n--- out\n{result.stdout}"
            f"\n--- err\n{result.stderr}"
        )
        ran.append(block)
        if "$NAME/start" in block:
            # The first unit: ordered, stopped, started again once Stopped, and deleted; and
            # the same again when the block runs a second time (each run orders its own).
            again = run_block(stack, block)
            assert again.returncode == 0, again.stdout + again.stderr
            for said in (result.stdout, again.stdout):
                flat = said.replace(" ", "")
                assert "HTTP 201" in said, said
                assert '"replayed":false' in flat, said
                for kind in ("stop", "start"):
                    assert f'"kind":"{kind}"' in flat, said
                assert '"phase":"Terminating"' in flat, said
        if "--connect-to" in block:
            # The unit's URL through the gateway reached its pod: the page names them.
            assert GATEWAY_PAGE in result.stdout, result.stdout
            assert "Unit       GPUUnit runtime-instance/web-demo" in result.stdout, result.stdout
            assert "Pod        runtime-instance/unit-web-demo on node" in result.stdout
    assert any("gpu-units" in block for block in ran)
    assert any("--connect-to" in block for block in ran)
    assert any("make manage" in block for block in ran)
    assert any("$NAME/start" in block for block in ran)


def test_the_banner_says_where_the_key_is_and_does_not_print_it(stack):
    output = stack["log"].read_text()
    key = (stack["data"] / "demo-api-key").read_text().strip()
    assert key not in output
    assert "demo-api-key" in output
    assert "GPU control plane is up:" in output  # health said ok before the banner


def test_make_manage_refuses_without_a_running_stack(tmp_path):
    result = subprocess.run(
        ["make", "--no-print-directory", "manage", "ARGS=check", f"DATA={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "make run is not running" in result.stderr


def test_sigterm_to_the_process_group_stops_everything(stack):
    process = stack["process"]
    children = psutil.Process(process.pid).children(recursive=True)
    names = " ".join(" ".join(child.cmdline()) for child in children)
    for expected in ("gunicorn", "kube-apiserver", "kwok", "celery", "observe", "redis-server"):
        assert expected in names
    # make and the launcher both get it (and make passes it on): the second must not break
    # the cleanup halfway, which left gunicorn and the cluster running.
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=60)  # make's own status is the signal's
    _gone, alive = psutil.wait_procs(children, timeout=20)
    assert "Traceback" not in stack["log"].read_text(), stack["log"].read_text()[-3000:]
    assert not alive, [" ".join(p.cmdline()) for p in alive if p.is_running()]
    assert not (stack["data"] / "stack.json").exists()
    # PostgreSQL runs detached (pg_ctl); it is stopped too.
    assert not (stack["data"] / "postgres" / "pgdata" / "postmaster.pid").exists()
    assert re.search(r"stopping\.\.\.", stack["log"].read_text())


def test_the_readme_links_nothing_outside_the_repository():
    """A clone has no ../shared: every relative link the README makes is to a file in it (the
    overlay example's ../gpu-control-plane is the reader's own checkout, not a link)."""
    text = README.read_text()
    assert "../shared" not in text
    for target in re.findall(r"\]\((?!https?://)([^)#]+)\)", text):
        assert (ROOT / target).exists(), target
