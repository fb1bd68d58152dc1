"""Settings come from the environment; production mode refuses to start half-configured."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def django_check(**env_overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "ALLOWED_"))}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({}, "DJANGO_SECRET_KEY, ALLOWED_HOSTS"),
        ({"DJANGO_SECRET_KEY": "x" * 60}, "ALLOWED_HOSTS"),
        ({"ALLOWED_HOSTS": "gpu.example.com"}, "DJANGO_SECRET_KEY"),
    ],
)
def test_production_mode_refuses_to_start_without_secret_and_hosts(given, missing):
    result = django_check(DJANGO_DEBUG="0", **given)
    assert result.returncode != 0
    assert f"needs {missing} in the environment" in result.stderr


def test_production_settings_pass_deploy_checks():
    result = django_check(
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="a-long-random-production-secret-" + "k" * 40,
        ALLOWED_HOSTS="gpu.example.com",
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("database_url", [None, ""])
def test_database_url_is_required(database_url):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**env, "DJANGO_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "DATABASE_URL is not set" in result.stderr
