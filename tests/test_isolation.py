"""tests/isolation.py: each pytest-xdist worker of `make test` takes a Redis database of its
own, and a run without workers keeps the one it was given."""

from __future__ import annotations

import pytest

from tests import isolation


@pytest.mark.parametrize(
    ("worker", "given", "expected"),
    [
        ("gw0", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1"),
        ("gw2", "redis://:secret@127.0.0.1:41000/0", "redis://:secret@127.0.0.1:41000/3"),
        ("gw1", "redis://127.0.0.1:6379", "redis://127.0.0.1:6379/2"),
        ("", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_each_worker_takes_a_redis_database_of_its_own(monkeypatch, worker, given, expected):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("REDIS_URL", given)
    isolation._isolate()
    assert isolation.os.environ["REDIS_URL"] == expected


def test_more_workers_than_databases_are_refused(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw15")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    with pytest.raises(RuntimeError, match="at most 15 xdist workers"):
        isolation._isolate()
