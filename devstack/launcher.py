"""`make run`: services, migrations, sample data, then web + worker + beat until Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from devstack import services

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CATALOG = ROOT / "catalog" / "samples" / "packages.yaml"


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True)


def _start(name: str, command: list[str], env: dict[str, str]) -> tuple[str, subprocess.Popen]:
    # Own process group: one Ctrl-C reaches us once and we stop children in order.
    return name, subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)


def _stop(processes: list[tuple[str, subprocess.Popen]]) -> None:
    for _name, process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for _name, process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def run(*, data_root: Path) -> int:
    port = os.environ.get("PORT", "8000")
    data_root.mkdir(parents=True, exist_ok=True)

    def terminate(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    processes: list[tuple[str, subprocess.Popen]] = []
    with services.environment(data_root=data_root) as env:
        try:
            _manage(env, "migrate", "--noinput")
            _manage(env, "import_catalog", str(SAMPLE_CATALOG), "--if-empty")
            _manage(env, "ensure_superuser", "--username", "admin")
            python = sys.executable
            processes = [
                _start(
                    "web",
                    [
                        python,
                        "-m",
                        "gunicorn",
                        "controlplane.wsgi:application",
                        "--bind",
                        f"127.0.0.1:{port}",
                        "--workers",
                        "2",
                        "--threads",
                        "4",
                        "--access-logfile",
                        "-",
                    ],
                    env,
                ),
                _start(
                    "worker",
                    [
                        python,
                        "-m",
                        "celery",
                        "-A",
                        "controlplane",
                        "worker",
                        "--concurrency",
                        "2",
                        "--loglevel",
                        "INFO",
                    ],
                    env,
                ),
                _start(
                    "beat",
                    [
                        python,
                        "-m",
                        "celery",
                        "-A",
                        "controlplane",
                        "beat",
                        "--loglevel",
                        "INFO",
                        "--schedule",
                        str(data_root / "celerybeat-schedule"),
                    ],
                    env,
                ),
            ]
            base = f"http://127.0.0.1:{port}"
            print(
                "\nGPU control plane is up:\n"
                f"  API health   {base}/api/v1/health\n"
                f"  packages     {base}/api/v1/packages\n"
                f"  API docs     {base}/api/docs/\n"
                f"  admin        {base}/admin/  (user admin)\n"
                f"  try          curl -s {base}/api/v1/packages\n"
                "Press Ctrl-C to stop everything.\n",
                flush=True,
            )
            while all(process.poll() is None for _name, process in processes):
                time.sleep(0.5)
            failed = [name for name, process in processes if process.poll() is not None]
            print(f"stopping: {', '.join(failed)} exited", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\nstopping...", flush=True)
            return 0
        except subprocess.CalledProcessError as exc:
            print(f"setup step failed: {' '.join(exc.cmd)}", file=sys.stderr)
            return 1
        finally:
            _stop(processes)
