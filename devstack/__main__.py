"""`python -m devstack exec -- CMD...` runs CMD with DATABASE_URL/REDIS_URL set (embedded
services started when unset); `python -m devstack run` is `make run`; `python -m devstack
manage ARGS...` is `manage.py ARGS` against that running `make run` (`make manage ARGS=...`)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from devstack import launcher, services


def _exec(command: list[str]) -> int:
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("usage: python -m devstack exec -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    with services.environment() as env:
        return subprocess.call(command, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack")
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="set up and serve the whole product (make run)")
    run.add_argument("--data", type=Path, default=Path(".devdata"), help="persistent data folder")
    sub.add_parser("exec", help="run a command with embedded services (make test)")
    manage = sub.add_parser("manage", help="manage.py against the running make run")
    manage.add_argument("--data", type=Path, default=Path(".devdata"), help="its data folder")
    args, rest = parser.parse_known_args(argv)
    if args.action == "exec":
        return _exec(rest)
    if args.action == "manage":
        return launcher.manage(rest, data_root=args.data.resolve())
    return launcher.run(data_root=args.data.resolve())


if __name__ == "__main__":
    sys.exit(main())
