"""gpuctl's profiles, kept in $XDG_CONFIG_HOME/gpuctl/config.toml (~/.config by default), and
which API URL and key a command uses: `--profile`, then GPUCTL_PROFILE, then the file's
current profile picks the profile; GPUCTL_API_URL and GPUCTL_API_KEY override its values."""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpuctl.errors import ExitCode, GpuctlError

ENV_PROFILE = "GPUCTL_PROFILE"
ENV_API_URL = "GPUCTL_API_URL"
ENV_API_KEY = "GPUCTL_API_KEY"
DEFAULT_PROFILE = "default"
PROFILE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class Profile:
    api_url: str = ""
    api_key: str = ""


@dataclass
class Config:
    """The file's contents: its profiles by name and the one used when none is named."""

    current: str = ""
    profiles: dict[str, Profile] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    """What a command talks to, and where each value came from (for `gpuctl config show`)."""

    profile: str
    api_url: str
    api_key: str
    sources: Mapping[str, str]

    def require(self) -> Settings:
        """These settings, when they name an API and a key; else a usage error saying how."""
        values = (("API URL", self.api_url), ("API key", self.api_key))
        missing = [what for what, value in values if not value]
        if missing:
            raise GpuctlError(
                f"no {' and no '.join(missing)} in profile {self.profile!r}: run `gpuctl config "
                f"set-profile {self.profile} --api-url URL --api-key KEY`, or set "
                f"{ENV_API_URL} and {ENV_API_KEY}",
                exit_code=ExitCode.USAGE,
            )
        return self


def config_path(environ: Mapping[str, str]) -> Path:
    """$XDG_CONFIG_HOME/gpuctl/config.toml; ~/.config when it is unset or not absolute (as the
    XDG Base Directory specification says)."""
    base = environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else _home(environ) / ".config"
    return root / "gpuctl" / "config.toml"


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ["HOME"]) if environ.get("HOME") else Path.home()


def check_profile_name(name: str) -> str:
    if not PROFILE_NAME.fullmatch(name):
        raise GpuctlError(
            f"a profile name is 1-64 letters, digits, '-' or '_', not {name!r}",
            exit_code=ExitCode.USAGE,
        )
    return name


def load(path: Path) -> Config:
    """The config at `path`; an empty one when there is no file."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Config()
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise GpuctlError(f"cannot read {path}: {error}", exit_code=ExitCode.USAGE) from None
    profiles = document.get("profiles", {})
    current = document.get("current-profile", "")
    if not isinstance(profiles, dict) or not isinstance(current, str):
        raise GpuctlError(f"{path}: not a gpuctl config", exit_code=ExitCode.USAGE)
    return Config(
        current=current,
        profiles={
            name: Profile(
                api_url=str(values.get("api-url", "")), api_key=str(values.get("api-key", ""))
            )
            for name, values in profiles.items()
            if isinstance(values, dict)
        },
    )


def dumps(config: Config) -> str:
    """`config` as TOML that tomllib reads back as it was (gpuctl writes only strings)."""
    lines = ["# gpuctl profiles: gpuctl config set-profile NAME, gpuctl config use NAME"]
    if config.current:
        lines.append(f"current-profile = {_string(config.current)}")
    for name, profile in sorted(config.profiles.items()):
        lines += ["", f"[profiles.{_key(name)}]"]
        lines += [
            f"{key} = {_string(value)}"
            for key, value in (("api-url", profile.api_url), ("api-key", profile.api_key))
            if value
        ]
    return "\n".join(lines) + "\n"


def save(config: Config, path: Path) -> None:
    """Write `config` to `path` whole (a reader never sees half of it), readable by its owner
    alone: it holds API keys."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".toml")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(dumps(config))
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def resolve(config: Config, environ: Mapping[str, str], *, profile: str | None = None) -> Settings:
    """The settings a command uses: the profile named by `profile` (the --profile flag), else
    GPUCTL_PROFILE, else the config's current one, else "default"; then GPUCTL_API_URL and
    GPUCTL_API_KEY over its values. A profile named by flag or variable must exist, unless the
    variables give both values."""
    if profile:
        name, source = profile, "--profile"
    elif environ.get(ENV_PROFILE):
        name, source = environ[ENV_PROFILE], ENV_PROFILE
    elif config.current:
        name, source = config.current, "config"
    else:
        name, source = DEFAULT_PROFILE, "default"
    stored = config.profiles.get(name)
    overridden = bool(environ.get(ENV_API_URL) and environ.get(ENV_API_KEY))
    if stored is None and source in ("--profile", ENV_PROFILE) and not overridden:
        known = ", ".join(sorted(config.profiles)) or "none"
        raise GpuctlError(
            f"no profile {name!r} (profiles: {known}): create it with `gpuctl config "
            f"set-profile {name} --api-url URL --api-key KEY`",
            exit_code=ExitCode.USAGE,
        )
    stored = stored or Profile()
    sources = {"profile": source}
    values = {}
    for key, env, value in (
        ("api_url", ENV_API_URL, stored.api_url),
        ("api_key", ENV_API_KEY, stored.api_key),
    ):
        if environ.get(env):
            values[key], sources[key] = environ[env], env
        else:
            values[key], sources[key] = value, f"profile {name}" if value else "unset"
    return Settings(profile=name, sources=sources, **values)


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _string(name)


def _string(value: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    escaped = []
    for character in value:
        if character in '"\\':
            escaped.append("\\" + character)
        elif ord(character) < 0x20 or ord(character) == 0x7F:
            escaped.append(f"\\u{ord(character):04X}")
        else:
            escaped.append(character)
    return '"' + "".join(escaped) + '"'
