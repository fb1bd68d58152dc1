"""PostgreSQL session advisory locks: "one at a time across every process" for work that may
be handed to several processes at once, without a row to lock. A lock is held on the calling
thread's database connection, so it is released with the block or, if the process dies, with
its connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def held(key: int, name: str) -> Iterator[bool]:
    """Take the lock (key, hashtext(name)) for the block if nobody holds it: yields whether it
    was taken (the block runs either way and decides what to do without it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", [key, name])
        acquired = cursor.fetchone()[0]
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", [key, name])
