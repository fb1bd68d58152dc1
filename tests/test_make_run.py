"""`make run` end to end: embedded services, sample data, web/worker/beat; Ctrl-C stops all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from devstack.services import free_port

ROOT = Path(__file__).resolve().parent.parent


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_until_up(base: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            if get(f"{base}/api/v1/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail("make run did not serve /api/v1/health within 120 s:\n" + log.read_text())


def start(data: Path, port: int, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(PORT=str(port), ADMIN_PASSWORD="correct-horse-battery")
    return subprocess.Popen(
        [sys.executable, "-m", "devstack", "run", "--data", str(data)],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def stop_with_ctrl_c(process: subprocess.Popen) -> dict[int, str]:
    """SIGINT the launcher as a terminal's Ctrl-C would; return the children it had."""
    children = {c.pid: " ".join(c.cmdline()) for c in psutil.Process(process.pid).children(True)}
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    return children


def test_make_run_serves_api_and_admin_and_stops_on_ctrl_c(tmp_path):
    port, data, log = free_port(), tmp_path / "devdata", tmp_path / "run.log"
    base = f"http://127.0.0.1:{port}"
    process = start(data, port, log)
    try:
        wait_until_up(base, process, log)
        status, body = get(f"{base}/api/v1/health")
        assert json.loads(body)["data"]["checks"]["database"]["ok"] is True
        status, body = get(f"{base}/admin/login/")
        assert status == 200
        assert b"GPU control plane" in body
        status, body = get(f"{base}/api/v1/packages")
        assert len(json.loads(body)["data"]) == 5
        children = stop_with_ctrl_c(process)
    finally:
        if process.poll() is None:
            process.kill()
    commands = " | ".join(children.values())
    for expected in ("redis-server", "gunicorn", "worker", "beat"):
        assert expected in commands
    assert not [pid for pid in children if psutil.pid_exists(pid)]
    with pytest.raises(urllib.error.URLError, match="refused"):
        get(f"{base}/api/v1/health")
    assert not (data / "postgres" / "pgdata" / "postmaster.pid").exists()

    # A restart keeps the data: the sample is not imported twice, the admin is kept.
    process = start(data, port, log)
    try:
        wait_until_up(base, process, log)
        assert len(json.loads(get(f"{base}/api/v1/packages")[1])["data"]) == 5
        stop_with_ctrl_c(process)
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text()
    assert "catalog already has packages" in output
    assert "superuser 'admin': password set from ADMIN_PASSWORD" in output
