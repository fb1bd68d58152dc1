"""Profiles: where config.toml lives, how a profile and its values are chosen, and the file
written back as TOML that reads as it was written."""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path

import pytest

from gpuctl import config
from gpuctl.errors import ExitCode, GpuctlError

DEV = config.Profile(api_url="http://127.0.0.1:8000", api_key="dev-key")
PROD = config.Profile(api_url="https://gpu.example.com", api_key="prod-key")
TWO = config.Config(current="dev", profiles={"dev": DEV, "prod": PROD})


def test_the_config_lives_under_xdg_config_home_else_home_config():
    assert config.config_path({"XDG_CONFIG_HOME": "/x/conf", "HOME": "/home/a"}) == Path(
        "/x/conf/gpuctl/config.toml"
    )
    assert config.config_path({"HOME": "/home/a"}) == Path("/home/a/.config/gpuctl/config.toml")
    # A relative XDG_CONFIG_HOME is invalid by the specification, and ignored.
    assert config.config_path({"XDG_CONFIG_HOME": "conf", "HOME": "/home/a"}) == Path(
        "/home/a/.config/gpuctl/config.toml"
    )


def test_the_current_profile_is_used_when_none_is_named():
    settings = config.resolve(TWO, {})
    assert (settings.profile, settings.api_url, settings.api_key) == ("dev", DEV.api_url, "dev-key")
    assert settings.sources == {
        "profile": "config",
        "api_url": "profile dev",
        "api_key": "profile dev",
    }


def test_the_flag_beats_gpuctl_profile_which_beats_the_current_profile():
    assert config.resolve(TWO, {"GPUCTL_PROFILE": "prod"}).api_url == PROD.api_url
    chosen = config.resolve(TWO, {"GPUCTL_PROFILE": "prod"}, profile="dev")
    assert (chosen.profile, chosen.sources["profile"]) == ("dev", "--profile")


def test_the_variables_override_the_profile_s_values_one_by_one():
    settings = config.resolve(TWO, {"GPUCTL_API_KEY": "from-env"})
    assert (settings.api_url, settings.api_key) == (DEV.api_url, "from-env")
    assert settings.sources["api_key"] == "GPUCTL_API_KEY"
    assert settings.sources["api_url"] == "profile dev"


def test_variables_alone_need_no_file():
    environ = {"GPUCTL_API_URL": "http://api", "GPUCTL_API_KEY": "k", "GPUCTL_PROFILE": "ci"}
    settings = config.resolve(config.Config(), environ).require()
    assert (settings.profile, settings.api_url, settings.api_key) == ("ci", "http://api", "k")


def test_a_named_profile_that_does_not_exist_is_a_usage_error_listing_those_that_do():
    with pytest.raises(GpuctlError) as raised:
        config.resolve(TWO, {}, profile="staging")
    assert raised.value.exit_code == ExitCode.USAGE
    assert "no profile 'staging' (profiles: dev, prod)" in raised.value.message


def test_settings_without_url_or_key_say_how_to_set_them():
    settings = config.resolve(config.Config(), {})
    assert settings.profile == "default"
    with pytest.raises(GpuctlError) as raised:
        settings.require()
    assert raised.value.exit_code == ExitCode.USAGE
    assert "no API URL and no API key in profile 'default'" in raised.value.message
    assert "gpuctl config set-profile default --api-url URL --api-key KEY" in raised.value.message


def test_saved_config_reads_back_as_written_and_only_its_owner_can_read_it(tmp_path):
    path = tmp_path / "gpuctl" / "config.toml"
    tricky = config.Profile(api_url='http://h/"quoted"\\', api_key="k\tey\x7f\u00e9\U0001f600")
    written = config.Config(current="dev", profiles={"dev": DEV, "odd": tricky})
    config.save(written, path)
    assert config.load(path) == written
    assert tomllib.loads(path.read_text())["profiles"]["odd"]["api-key"] == tricky.api_key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["config.toml"]  # no temporary left


def test_a_missing_file_is_an_empty_config_and_a_broken_one_names_itself(tmp_path):
    assert config.load(tmp_path / "none.toml") == config.Config()
    broken = tmp_path / "config.toml"
    broken.write_text("[profiles.dev\n")
    with pytest.raises(GpuctlError) as raised:
        config.load(broken)
    assert raised.value.exit_code == ExitCode.USAGE
    assert str(broken) in raised.value.message


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.no"])
def test_profile_names_are_short_words(name):
    with pytest.raises(GpuctlError):
        config.check_profile_name(name)
