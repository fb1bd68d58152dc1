"""The request bodies gpuctl builds from flags: an order (`units create`), an update, a
secret. Pure: the API validates them, this only shapes them and names the flag at fault."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpuctl.errors import ExitCode, GpuctlError

DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def usage_error(message: str) -> GpuctlError:
    return GpuctlError(message, exit_code=ExitCode.USAGE)


def pair(text: str, flag: str, *, separator: str = "=") -> tuple[str, str]:
    key, found, value = text.partition(separator)
    if not found or not key:
        raise usage_error(f"{flag} takes KEY{separator}VALUE, not {text!r}")
    return key, value


def env_var(text: str) -> dict[str, Any]:
    """`--env NAME=VALUE`."""
    name, value = pair(text, "--env")
    return {"name": name, "value": value}


def secret_env_var(text: str) -> dict[str, Any]:
    """`--secret-env NAME=SECRET:KEY`: the variable reads one key of one of the tenant's
    secrets."""
    name, reference = pair(text, "--secret-env")
    secret, found, key = reference.partition(":")
    if not (found and secret and key):
        raise usage_error(f"--secret-env takes NAME=SECRET:KEY, not {text!r}")
    return {"name": name, "secretRef": {"name": secret, "key": key}}


def port(text: str) -> dict[str, Any]:
    """`--port NAME:PORT[/PROTOCOL]`, e.g. http:8080 or dns:53/UDP."""
    name, found, rest = text.partition(":")
    number, _, protocol = rest.partition("/")
    if not (found and name and number.isdigit()):
        raise usage_error(f"--port takes NAME:PORT[/PROTOCOL], e.g. http:8080, not {text!r}")
    shaped: dict[str, Any] = {"name": name, "port": int(number)}
    if protocol:
        shaped["protocol"] = protocol.upper()
    return shaped


def mount(text: str) -> dict[str, Any]:
    """`--mount STORAGE:PATH[:ro]`."""
    parts = text.split(":")
    read_only = len(parts) == 3 and parts[2] == "ro"
    if len(parts) not in (2, 3) or not all(parts[:2]) or (len(parts) == 3 and not read_only):
        raise usage_error(f"--mount takes STORAGE:PATH or STORAGE:PATH:ro, not {text!r}")
    shaped: dict[str, Any] = {"name": parts[0], "mountPath": parts[1]}
    if read_only:
        shaped["readOnly"] = True
    return shaped


def seconds(text: str) -> int:
    """A duration such as 90s, 10m or 1h30m, in seconds (a bare number is seconds)."""
    if text.isdigit():
        return int(text)
    found = DURATION.fullmatch(text)
    if not text or found is None:
        raise usage_error(f"not a duration (e.g. 90s, 10m, 1h30m): {text!r}")
    days, hours, minutes, secs = (int(part or 0) for part in found.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + secs


def document(file: Path) -> dict[str, Any]:
    """The object of request fields in a YAML (or JSON) file."""
    try:
        loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise usage_error(f"cannot read {file}: {error}") from None
    if not isinstance(loaded, dict):
        raise usage_error(f"{file}: expected an object of request fields")
    # Round-trip through JSON so dates and the like arrive as the strings the API reads.
    return json.loads(json.dumps(loaded, default=str))


def order(
    *,
    operation_id: str,
    name: str,
    package: str,
    image: str,
    base: Mapping[str, Any] | None = None,
    region: str | None = None,
    command: Sequence[str] = (),
    env: Sequence[str] = (),
    secret_env: Sequence[str] = (),
    ports: Sequence[str] = (),
    scheme: str | None = None,
    ssh: bool = False,
    ssh_keys: Sequence[str] = (),
    mounts: Sequence[str] = (),
    stop_after: str | None = None,
    interruptible: bool = False,
    auto_resume: bool = False,
    reservation: str | None = None,
) -> dict[str, Any]:
    """The body of POST /gpu-units: `base` (a file's fields) with the flags over it."""
    body: dict[str, Any] = dict(base or {})
    body.update(operationID=operation_id, name=name, packageID=package, image=image)
    template = dict(body.get("template") or {})
    if command:
        template["command"] = list(command)
    variables = [env_var(item) for item in env] + [secret_env_var(item) for item in secret_env]
    if variables:
        template["env"] = [*template.get("env", []), *variables]
    if ports:
        template["ports"] = [*template.get("ports", []), *(port(item) for item in ports)]
    if template:
        body["template"] = template
    if scheme:
        body["access"] = {**(body.get("access") or {}), "scheme": scheme}
    if ssh or ssh_keys:
        body["ssh"] = {"enabled": True, **({"keys": list(ssh_keys)} if ssh_keys else {})}
    if mounts:
        body["storageMounts"] = [*body.get("storageMounts", []), *(mount(m) for m in mounts)]
    if region:
        body["region"] = region
    if stop_after:
        body["stopAfter"] = stop_after
    if interruptible:
        body["interruptible"] = True
    if auto_resume:
        body["autoResume"] = True
    if reservation:
        body["reservation"] = reservation
    return body


def update(
    *,
    operation_id: str,
    base: Mapping[str, Any] | None = None,
    image: str | None = None,
    stop_after: str | None = None,
) -> dict[str, Any]:
    """The JSON merge patch of PATCH /gpu-units/{name}: `base` (a file's) with the flags over
    it; `--stop-after none` clears the unit's stopAfter (null)."""
    patch: dict[str, Any] = {**(base or {}), "operationID": operation_id}
    if image:
        patch["image"] = image
    if stop_after:
        patch["stopAfter"] = None if stop_after.lower() == "none" else stop_after
    if len(patch) == 1:
        raise usage_error("nothing to change: give --image, --stop-after or --file")
    return patch


def secret_data(literals: Sequence[str], env_file: Path | None) -> dict[str, str]:
    """A secret's KEY: value pairs from `--from-literal KEY=VALUE` and a KEY=VALUE file
    (blank lines and # comments skipped)."""
    data: dict[str, str] = {}
    if env_file is not None:
        try:
            lines = env_file.read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise usage_error(f"cannot read {env_file}: {error}") from None
        for line in lines:
            if line.strip() and not line.lstrip().startswith("#"):
                key, value = pair(line, f"{env_file}:")
                data[key.strip()] = value
    for literal in literals:
        key, value = pair(literal, "--from-literal")
        data[key] = value
    if not data:
        raise usage_error("a secret needs --from-literal KEY=VALUE or --from-env-file PATH")
    return data
