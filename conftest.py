"""Shared pytest fixtures: API clients and a real Celery worker process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker):
    """A real `celery worker` subprocess using the test database and the test Redis."""
    from django.conf import settings

    env = dict(os.environ)
    test_db = settings.DATABASES["default"]["NAME"]
    url = os.environ["DATABASE_URL"]
    base, _, query = url.partition("?")
    env["DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + test_db + (f"?{query}" if query else "")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            "4",
            "--loglevel",
            "WARNING",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    from controlplane.celery import app

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"celery worker exited with {process.returncode}")
        if app.control.ping(timeout=0.5):
            break
    else:
        process.kill()
        raise RuntimeError("celery worker did not answer ping within 60 s")
    yield process
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
