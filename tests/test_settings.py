"""Settings come from the environment; production mode refuses to start half-configured."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def manage(*args: str, **env_overrides: str) -> subprocess.CompletedProcess:
    inherited = ("DJANGO_", "ALLOWED_", "METRICS_TOKEN", "CLUSTER_", "NETWORK_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def django_check(**env_overrides: str) -> subprocess.CompletedProcess:
    return manage("check", "--deploy", "--fail-level", "WARNING", **env_overrides)


PRODUCTION = {
    "DJANGO_SECRET_KEY": "a-long-random-production-secret-" + "k" * 40,
    "ALLOWED_HOSTS": "gpu.example.com",
    "METRICS_TOKEN": "a-scraper-token",
}


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({}, "DJANGO_SECRET_KEY, ALLOWED_HOSTS, METRICS_TOKEN"),
        ({"DJANGO_SECRET_KEY": "x" * 60, "METRICS_TOKEN": "t"}, "ALLOWED_HOSTS"),
        ({"ALLOWED_HOSTS": "gpu.example.com", "METRICS_TOKEN": "t"}, "DJANGO_SECRET_KEY"),
        ({"DJANGO_SECRET_KEY": "x" * 60, "ALLOWED_HOSTS": "gpu.example.com"}, "METRICS_TOKEN"),
    ],
)
def test_production_mode_refuses_to_start_without_secret_hosts_and_metrics_token(given, missing):
    result = django_check(DJANGO_DEBUG="0", **given)
    assert result.returncode != 0
    assert f"needs {missing} in the environment" in result.stderr


def test_production_settings_pass_deploy_checks():
    result = django_check(DJANGO_DEBUG="0", **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("CLUSTER_POD_CIDRS", "10.244.0.0/16,10.0.0.1/8", "'10.0.0.1/8' is not a network"),
        ("CLUSTER_SERVICE_CIDRS", "2001:db8:1::/129", "'2001:db8:1::/129' is not a network"),
        ("CLUSTER_NODE_CIDRS", "::/0", "'::/0' is every address"),
        ("NETWORK_EGRESS_ALLOW", "registry.example.com", "'registry.example.com' is not a"),
    ],
)
def test_network_ranges_that_are_not_networks_stop_the_process_when_they_are_read(
    variable, value, said
):
    result = django_check(DJANGO_DEBUG="1", **{variable: value})
    assert result.returncode != 0
    assert f"ImproperlyConfigured: {variable}: {said}" in result.stderr


def test_cluster_ranges_of_both_families_are_read_in_canonical_form():
    shown = manage(
        "shell",
        "-c",
        "from django.conf import settings as s; "
        "print(s.CLUSTER_POD_CIDRS, s.CLUSTER_SERVICE_CIDRS, s.CLUSTER_NODE_CIDRS)",
        DJANGO_DEBUG="1",
        CLUSTER_POD_CIDRS="100.64.0.0/10, FD12:3456:0::/48",
        CLUSTER_SERVICE_CIDRS="203.0.113.0/24,2001:0db8:1::/64",
        CLUSTER_NODE_CIDRS="198.51.100.7, ",
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split("\n")[-2] == (
        "['100.64.0.0/10', 'fd12:3456::/48'] ['203.0.113.0/24', '2001:db8:1::/64'] "
        "['198.51.100.7/32']"
    )


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
