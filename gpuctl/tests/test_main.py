"""The `gpuctl` command as a user meets it without a server: profiles set up and shown, and
failures before any answer (no profile, nothing listening, a bad flag) as a message on
standard error and their exit codes."""

from __future__ import annotations

import io
import socket
import sys

import pytest

from gpuctl.main import main


@pytest.fixture
def run(monkeypatch, tmp_path, capsys):
    """Run gpuctl with `args` in a clean environment whose config lives in tmp_path: (exit
    code, stdout, stderr)."""
    for variable in ("GPUCTL_PROFILE", "GPUCTL_API_URL", "GPUCTL_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")

    def gpuctl(*args: str, **env: str) -> tuple[int, str, str]:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(sys, "argv", ["gpuctl", *args])
        with pytest.raises(SystemExit) as exited:
            main()
        out, err = capsys.readouterr()
        code = exited.value.code
        return (code if isinstance(code, int) else 0 if code is None else 1), out, err

    return gpuctl


def closed_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return free.getsockname()[1]


def test_profiles_are_set_listed_switched_and_shown(run, tmp_path):
    assert (
        run(
            "config",
            "set-profile",
            "dev",
            "--api-url",
            "http://127.0.0.1:8000/",
            "--api-key",
            "dev-key-0123456789",
        )[0]
        == 0
    )
    assert (
        run(
            "config",
            "set-profile",
            "prod",
            "--api-url",
            "https://gpu.example.com",
            "--api-key",
            "prod-key-0123456789",
        )[0]
        == 0
    )
    code, out, _ = run("config", "list")
    assert code == 0
    rows = [line.split() for line in out.splitlines()[1:]]
    # The first profile made is the current one; keys are never shown whole.
    assert rows == [
        ["*", "dev", "http://127.0.0.1:8000", "dev-key-…"],
        ["prod", "https://gpu.example.com", "prod-key…"],
    ]
    assert run("config", "use", "prod")[0] == 0
    code, out, _ = run("config", "show", "-o", "json")
    assert code == 0
    assert '"profile": "prod"' in out
    assert "prod-key-0123456789" not in out
    code, out, _ = run("config", "show", "-o", "yaml", GPUCTL_API_KEY="from-the-environment")
    assert "apiKey: GPUCTL_API_KEY" in out
    assert (tmp_path / "gpuctl" / "config.toml").exists()


def test_without_a_profile_a_command_says_how_to_make_one(run):
    code, out, err = run("units", "list")
    assert (code, out) == (2, "")
    assert "gpuctl: no API URL and no API key in profile 'default'" in err


def test_a_profile_that_does_not_exist_is_a_usage_error(run):
    code, _, err = run("--profile", "nope", "units", "list")
    assert code == 2
    assert "no profile 'nope'" in err


def test_an_api_nobody_answers_is_exit_7(run):
    url = f"http://127.0.0.1:{closed_port()}"
    code, _, err = run("units", "list", GPUCTL_API_URL=url, GPUCTL_API_KEY="k")
    assert code == 7
    assert err.startswith(f"gpuctl: cannot reach {url}")


def test_a_malformed_flag_is_exit_2_before_anything_is_sent(run):
    url = f"http://127.0.0.1:{closed_port()}"
    env = {"GPUCTL_API_URL": url, "GPUCTL_API_KEY": "k"}
    code, _, err = run(
        "units", "create", "u", "-p", "pkg", "-i", "busybox", "--port", "http", **env
    )
    assert code == 2
    assert "--port takes NAME:PORT[/PROTOCOL]" in err
    code, _, err = run("units", "get", **env)  # click's own usage error
    assert code == 2
    assert "Missing argument 'name'" in err


def test_help_documents_the_exit_codes(run):
    code, out, _ = run("--help")
    assert code == 0
    assert "Exit codes: 0 ok; 1 other error; 2 usage" in " ".join(out.split())


def test_a_key_on_the_command_line_and_a_plain_http_url_are_warned_about(
    run, tmp_path, monkeypatch
):
    """Issue 41, item 8: gpuctl took both without a word."""
    code, _out, err = run(
        "config", "set-profile", "far", "--api-url", "http://api.example.com", "--api-key", "k1"
    )
    assert code == 0, err
    assert "stays in your shell's history" in err
    assert "plain http" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO("k2\n"))
    code, _out, err = run(
        "config", "set-profile", "near", "--api-url", "http://127.0.0.1:8000", "--api-key", "-"
    )
    assert code == 0, err
    assert "history" not in err
    assert "plain http" not in err
    assert 'api-key = "k2"' in (tmp_path / "gpuctl" / "config.toml").read_text()
