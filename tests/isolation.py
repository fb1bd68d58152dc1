"""A pytest plugin (loaded with `-p tests.isolation`, pyproject's addopts) that gives each
pytest-xdist worker a world of its own on the stack `make test` starts.

`make test` runs the suite in several worker processes (`-n`, Makefile PYTEST_WORKERS). Each
has its own session fixtures already: its simulated cluster, Celery worker and observer
(conftest.py), and pytest-django gives each its own test database (`test_<name>_gw<N>`).
Redis is the one thing they would share, and a shared broker would let one worker's Celery
take another's tasks, its control broadcasts (`app.control.ping`, `cancel_consumer`) and its
`purge()` reach the others, and the observers' status and leader keys collide. So each
xdist worker takes a Redis database of its own (gw0 → 1, gw1 → 2, ...; kombu prefixes its
broadcast channels with the database number, so they are apart too).

This must happen before Django's settings are read, which pytest-django does while pytest
loads the first conftest: hence a plugin module named by `-p`, imported before that.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

# Redis's default `databases 16`: 0 is the one a run without workers (and `make run`) uses.
_REDIS_DATABASES = 16


def _worker_number() -> int | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # set by xdist before pytest starts
    return int(worker[2:]) if worker.startswith("gw") else None


def _with_database(url: str, number: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{number}"))


def _isolate() -> None:
    number = _worker_number()
    if number is None or not os.environ.get("REDIS_URL"):
        return
    if number + 1 >= _REDIS_DATABASES:
        raise RuntimeError(f"at most {_REDIS_DATABASES - 1} xdist workers share one Redis")
    os.environ["REDIS_URL"] = _with_database(os.environ["REDIS_URL"], number + 1)


_isolate()
