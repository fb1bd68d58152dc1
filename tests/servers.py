"""gunicorn in front of the product on the test database, for the tests that need what only
the real server shows (its own answers, several processes and threads at once)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.db import connection

from devstack.services import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def gunicorn(*, workers: int = 1, threads: int = 1, **env: str) -> Iterator[str]:
    """gunicorn (the repository's gunicorn.conf.py) on a free port, reading pytest's test
    database, with `env` over the process's; yields its base URL once it listens."""
    url = urlsplit(os.environ["DATABASE_URL"])
    database = urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "controlplane.wsgi:application",
            f"--bind=127.0.0.1:{port}",
            f"--workers={workers}",
            f"--threads={threads}",
            "--log-level=warning",
        ],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database, **env},
    )
    try:
        wait_for_port(port, timeout=60, process=process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)
        connection.close()
