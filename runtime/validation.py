"""Pure checks for what customers send: operation IDs, unit names, image references, templates.
A body's shape (each field's JSON type) is declared in runtime/spec.py; these are the rules a
well-shaped value must also meet, safe to run on any JSON value."""

from __future__ import annotations

import posixpath
import re

OPERATION_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# Deletions get IDs of their own; '@' is not allowed in client IDs, so they never collide.
DELETE_OPERATION_PREFIX = "@delete-"
# Operations the control plane starts itself: a unit's deletion, its auto-stop, and the
# roll-out of a change to its spec it made itself (an SSH key removed from the tenant), and
# the stop that carries out a preemption and the start that resumes a preempted unit.
AUTO_STOP_OPERATION_PREFIX = "@autostop-"
PREEMPT_OPERATION_PREFIX = "@preempt-"
# The stop of a unit whose pod held its devices START_DEADLINE_SECONDS without a container.
START_DEADLINE_OPERATION_PREFIX = "@start-deadline-"
RESUME_OPERATION_PREFIX = "@resume-"
ROLL_OUT_OPERATION_PREFIX = "@rollout-"
# The restart that gives a unit a claim for the devices handed over to it.
HANDOVER_OPERATION_PREFIX = "@handover-"
# The stop of a unit at the end of its reservation (`atEnd: stop`).
RESERVATION_END_OPERATION_PREFIX = "@reservationend-"
_SERVICE_OPERATION = re.compile(
    r"^@(delete|autostop|preempt|resume|rollout|handover|reservationend)-"
)
UNIT_NAME_MAX = 54  # so unit-<name>-gpu fits a 63-character name
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# OCI / Docker image reference grammar (distribution/reference), anchored.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
# Exactly what registries serve and pods pin: sha256 and 64 lower-case hex digits.
_DIGEST = r"sha256:[0-9a-f]{64}"
IMAGE_REFERENCE = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
RESERVED_ENV = {"SPEC_NAME", "UNIT_NAME", "GPU_COUNT"}
# Variables that choose which devices a container sees, or how a shared device is split: a
# unit's devices come from its claim, so a tenant may set none of them. On nodes whose NVIDIA
# container runtime honours them for unprivileged containers, NVIDIA_VISIBLE_DEVICES=all would
# show every GPU of the node. Sources: the NVIDIA Container Toolkit's "Environment variables
# (OCI spec)" (NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_*,
# NVIDIA_DISABLE_REQUIRE, NVIDIA_MIG_*), its IMEX, GDS, GDRCopy, MOFED and NVSwitch feature
# flags; CUDA MPS's client variables (CUDA_MPS_*, set by the NVIDIA DRA driver for MPS
# sharing); HAMi-core's limits (CUDA_DEVICE_MEMORY_LIMIT*, CUDA_DEVICE_SM_LIMIT,
# CUDA_DEVICE_MEMORY_SHARED_CACHE, CUDA_OVERSUBSCRIBE).
DEVICE_ENV = {
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_DISABLE_REQUIRE",
    "NVIDIA_IMEX_CHANNELS",
    "NVIDIA_GDS",
    "NVIDIA_GDRCOPY",
    "NVIDIA_MOFED",
    "NVIDIA_NVSWITCH",
    "CUDA_DEVICE_SM_LIMIT",
    "CUDA_DEVICE_MEMORY_SHARED_CACHE",
    "CUDA_OVERSUBSCRIBE",
}
DEVICE_ENV_PREFIXES = ("NVIDIA_REQUIRE_", "NVIDIA_MIG_", "CUDA_MPS_", "CUDA_DEVICE_MEMORY_LIMIT")


def reserved_env(name: str) -> str | None:
    """Why a tenant may not set `name` (None when it may)."""
    if name in RESERVED_ENV:
        return f"{name} is set by the control plane."
    if name in DEVICE_ENV or name.startswith(DEVICE_ENV_PREFIXES):
        return (
            f"{name} selects or splits devices; a unit's devices come from its package's "
            "claim, so it is reserved."
        )
    return None


ENV_NAME_RULE = "not a valid environment variable name."


def env_name(name: str) -> str | None:
    """Why a tenant may not name a variable `name` (None when it may)."""
    if not ENV_NAME.fullmatch(name) or len(name) > 256:
        return ENV_NAME_RULE
    return reserved_env(name)


MAX_IMAGE = 512
MAX_ITEMS = 64
MAX_STRING = 4096


def operation_lookup_id(value: str) -> bool:
    """An ID an operation can have: a client's, or one the service gave a deletion."""
    return bool(OPERATION_ID.fullmatch(_SERVICE_OPERATION.sub("", value, count=1)))


def unit_name(value: str) -> str | None:
    if not value:
        return "name is required."
    if len(value) > UNIT_NAME_MAX:
        return f"name must be at most {UNIT_NAME_MAX} characters (unit-<name>-gpu must fit 63)."
    if not _LABEL.fullmatch(value):
        return (
            "name must be a DNS-1123 label: lower-case letters, digits and '-', starting and "
            "ending with a letter or digit."
        )
    return None


RESERVATION_NAME_MAX = 40  # so reservation-<name>-<slot> fits a 63-character name


def reservation_name(value: str) -> str | None:
    if not value:
        return "name is required."
    if len(value) > RESERVATION_NAME_MAX:
        return f"name must be at most {RESERVATION_NAME_MAX} characters."
    if not _LABEL.fullmatch(value):
        return (
            "name must be a DNS-1123 label: lower-case letters, digits and '-', starting and "
            "ending with a letter or digit."
        )
    return None


def image_registry(reference: str) -> str:
    """The registry an image is pulled from; Docker Hub when the reference names none."""
    match = IMAGE_REFERENCE.fullmatch(reference)
    domain = match.group("domain") if match else None
    first = reference.split("/", 1)[0]
    # As Docker does: the first component is a registry only if it looks like a host.
    if domain and ("." in first or ":" in first or first == "localhost"):
        return domain
    return "docker.io"


def image_reference(value: str, *, allowlist: list[str]) -> str | None:
    if not value:
        return "image is required."
    if len(value) > MAX_IMAGE or not IMAGE_REFERENCE.fullmatch(value):
        return (
            f'"{value}" is not a valid image reference '
            '(e.g. "python:3.12" or "ghcr.io/org/app@sha256:...").'
        )
    if allowlist and image_registry(value) not in allowlist:
        return (
            f"images must come from one of: {', '.join(allowlist)} "
            f"(this one is from {image_registry(value)})."
        )
    return None


# What the pod itself mounts or the kernel provides, which a storage must not hide: the system
# trees (/proc, /sys, /dev and below, /dev/shm the unit's shared memory), the SSH sidecar's
# authorized keys (manifests.SSH_KEYS_PATH, shared with the storages it sees), the service
# account tokens' directories, the files kubelet writes into every container, and the roots
# above them.
RESERVED_MOUNT_TREES = (
    "/proc",
    "/sys",
    "/dev",
    "/etc/ssh-keys",
    "/var/run/secrets",
    "/run/secrets",
)
RESERVED_MOUNT_PATHS = {
    "/",
    "/etc",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/run",
    "/var/run",
}


def reserved_mount_path(path: str) -> str | None:
    """Why a storage may not be mounted at `path` (a normalised absolute path), or None."""
    tree = next((t for t in RESERVED_MOUNT_TREES if path == t or path.startswith(f"{t}/")), None)
    if tree is not None or path in RESERVED_MOUNT_PATHS:
        return f"mountPath {path} is reserved: {tree or path} is the system's or the unit's own."
    return None


def _storable(text: str) -> bool:
    """Postgres text holds neither NUL nor lone surrogates (which JSON can still carry)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# IANA service names (RFC 6335 §5.1), as Kubernetes checks port names: at most 15 characters
# of lower-case letters, digits and '-', at least one letter, no '-' at either end or twice.
_PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
PROTOCOLS = ("TCP", "UDP")
SCHEMES = ("http", "https", "tcp")
MAX_PORTS = 16
# Said alike by the declared fields (runtime/spec.py) and the rules below.
PORT_NAME_RULE = (
    "name must be an IANA service name: at most 15 lower-case letters, digits and "
    "'-', not starting, ending or doubled '-'."
)
PORT_NUMBER_RULE = "port must be an integer from 1 to 65535."
PROTOCOL_RULE = "protocol must be TCP or UDP."
SCHEME_RULE = "scheme must be http, https or tcp."


def port_name(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "name is required: an IANA service name such as http."
    if len(value) > 15 or not _PORT_NAME.fullmatch(value) or "--" in value:
        return PORT_NAME_RULE
    if not re.search(r"[a-z]", value):
        return "name must contain a letter."
    return None


def ports(value: object) -> dict[str, str]:
    """Problems with `template.ports`, keyed by field path."""
    if not isinstance(value, list) or len(value) > MAX_PORTS:
        return {"template.ports": f"ports must be a list of at most {MAX_PORTS} {{name, port}}."}
    problems: dict[str, str] = {}
    names: set[str] = set()
    numbers: set[tuple[int, str]] = set()
    for index, entry in enumerate(value):
        where = f"template.ports[{index}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "port", "protocol"}:
            problems[where] = "each port is {name, port, protocol?}."
            continue
        name, number = entry.get("name"), entry.get("port")
        protocol = entry.get("protocol", "TCP")
        if not isinstance(protocol, str) or protocol not in PROTOCOLS:
            problems[f"{where}.protocol"] = PROTOCOL_RULE
            protocol = "TCP"  # judged as TCP for the checks below, which name their own fields
        if problem := port_name(name):
            problems[f"{where}.name"] = problem
        elif name in names:
            problems[f"{where}.name"] = f"port name {name} is listed twice."
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 65535:
            problems[f"{where}.port"] = PORT_NUMBER_RULE
        elif (number, protocol) in numbers:
            problems[f"{where}.port"] = f"port {number}/{protocol} is listed twice."
        if isinstance(name, str):
            names.add(name)
        if isinstance(number, int):
            numbers.add((number, protocol))
    return problems


def access(value: object, unit_ports: list[dict]) -> tuple[dict, dict[str, str]]:
    """`access` normalised (scheme lower-case, default http; primary port defaults to the
    first port) and its problems. Without ports there is nothing to reach: access is empty."""
    if value is None:
        value = {}
    if not isinstance(value, dict) or set(value) - {"primaryPort", "scheme"}:
        return {}, {"access": "access must be an object with primaryPort and scheme."}
    if not unit_ports:
        if value:
            return {}, {"access": "access needs template.ports: there is no port to reach."}
        return {}, {}
    scheme = value.get("scheme", "http")
    primary = value.get("primaryPort", unit_ports[0]["name"])
    problems: dict[str, str] = {}
    if not isinstance(scheme, str) or scheme.lower() not in SCHEMES:
        problems["access.scheme"] = SCHEME_RULE
    names = [port["name"] for port in unit_ports]
    if primary not in names:
        problems["access.primaryPort"] = f"primaryPort must name a port: {', '.join(names)}."
    else:
        chosen = unit_ports[names.index(primary)]
        if chosen.get("protocol", "TCP") != "TCP":
            problems["access.primaryPort"] = "the primary port must be a TCP port."
    if problems:
        return {}, problems
    return {"primaryPort": primary, "scheme": scheme.lower()}, {}


def template(value: object) -> dict[str, str]:
    """Problems with a `template` object, keyed by field path; empty when valid."""
    if not isinstance(value, dict):
        return {"template": "template must be an object with command, args, env and ports."}
    problems: dict[str, str] = {}
    for key in sorted(set(value) - {"command", "args", "env", "ports"}):
        problems[f"template.{key}"] = "unknown field."
    if "ports" in value:
        problems.update(ports(value["ports"]))
    for key in ("command", "args"):
        items = value.get(key, [])
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            problems[f"template.{key}"] = f"{key} must be a list of strings."
        elif len(items) > MAX_ITEMS or any(len(i) > MAX_STRING for i in items):
            problems[f"template.{key}"] = f"at most {MAX_ITEMS} items of {MAX_STRING} characters."
        elif not all(_storable(i) for i in items):
            problems[f"template.{key}"] = "strings may not contain NUL or unpaired surrogates."
    env = value.get("env", [])
    if not isinstance(env, list) or len(env) > MAX_ITEMS:
        problems["template.env"] = f"env must be a list of at most {MAX_ITEMS} {{name, value}}."
        return problems
    seen: set[str] = set()
    for index, entry in enumerate(env):
        where = f"template.env[{index}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "value", "secretRef"}:
            problems[where] = "each env entry is {name, value} or {name, secretRef}."
            continue
        name, val = entry.get("name"), entry.get("value", "")
        if not isinstance(name, str):
            problems[f"{where}.name"] = ENV_NAME_RULE
        elif problem := env_name(name):
            problems[f"{where}.name"] = problem
        elif name in seen:
            problems[f"{where}.name"] = f"{name} is listed twice."
        if "secretRef" in entry:
            if "value" in entry:
                problems[f"{where}.secretRef"] = "give value or secretRef, not both."
            else:
                problems.update(secret_ref(entry["secretRef"], f"{where}.secretRef"))
        elif not isinstance(val, str) or len(val) > MAX_STRING or not _storable(val):
            problems[f"{where}.value"] = (
                f"value must be a string of at most {MAX_STRING} characters, without NUL."
            )
        if isinstance(name, str):
            seen.add(name)
    return problems


SECRET_NAME_MAX = 56  # so secret-<name> fits 63
# A Secret key (Kubernetes' IsConfigMapKey): what secretKeyRef.key names.
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
SECRET_KEY_MAX = 253


def secret_name(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "name is required."
    if len(value) > SECRET_NAME_MAX or not _LABEL.fullmatch(value):
        return (
            f"name must be a DNS-1123 label of at most {SECRET_NAME_MAX} characters "
            "(the Kubernetes Secret is secret-<name>)."
        )
    return None


def secret_key(value: object) -> str | None:
    if (
        not isinstance(value, str)
        or not SECRET_KEY.fullmatch(value)
        or len(value) > SECRET_KEY_MAX
        or value in (".", "..")
        or value.startswith("..")
    ):
        return (
            f"a key is 1-{SECRET_KEY_MAX} of letters, digits, '-', '_' and '.' "
            "(not '.', '..' or starting with '..')."
        )
    return None


def secret_ref(value: object, where: str) -> dict[str, str]:
    """Problems with an env entry's `secretRef` ({name, key} of one of the tenant's secrets)."""
    if not isinstance(value, dict) or set(value) != {"name", "key"}:
        return {where: "secretRef is {name, key}: a secret of /secrets and one of its keys."}
    problems = {}
    if problem := secret_name(value["name"]):
        problems[f"{where}.name"] = problem
    if problem := secret_key(value["key"]):
        problems[f"{where}.key"] = problem
    return problems


def secret_refs(template: dict | None) -> list[tuple[int, dict]]:
    """(index, secretRef) of each env entry of a valid template that references a secret."""
    return [
        (index, entry["secretRef"])
        for index, entry in enumerate((template or {}).get("env") or [])
        if "secretRef" in entry
    ]


STORAGE_NAME_MAX = 55  # so storage-<name> fits 63
MAX_MOUNTS = 16


def storage_name(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "name is required."
    if len(value) > STORAGE_NAME_MAX or not _LABEL.fullmatch(value):
        return (
            f"name must be a DNS-1123 label of at most {STORAGE_NAME_MAX} characters "
            "(the claim is storage-<name>)."
        )
    return None


def storage_mounts(value: object) -> tuple[list[dict], dict[str, str]]:
    """`storageMounts` normalised (names lower-case, paths cleaned, sorted by name then path,
    as the seed runtime did) and its problems keyed by field path."""
    if value is None:
        return [], {}
    if not isinstance(value, list) or len(value) > MAX_MOUNTS:
        return [], {"storageMounts": f"storageMounts must be a list of at most {MAX_MOUNTS}."}
    problems: dict[str, str] = {}
    mounts: list[dict] = []
    names: set[str] = set()
    paths: set[str] = set()
    for index, entry in enumerate(value):
        where = f"storageMounts[{index}]"
        if not isinstance(entry, dict) or set(entry) - {"name", "mountPath", "readOnly"}:
            problems[where] = "each mount is {name, mountPath, readOnly?}."
            continue
        name = entry.get("name")
        name = name.strip().lower() if isinstance(name, str) and name.isascii() else name
        path = entry.get("mountPath")
        read_only = entry.get("readOnly", False)
        if problem := storage_name(name):
            problems[f"{where}.name"] = problem
        elif name in names:
            problems[f"{where}.name"] = f"storage {name} is mounted twice."
        cleaned = posixpath.normpath(path) if isinstance(path, str) and path else ""
        if not cleaned.startswith("/") or cleaned.startswith("//"):
            problems[f"{where}.mountPath"] = "mountPath must be an absolute path."
        elif len(cleaned) > 1024:
            problems[f"{where}.mountPath"] = "mountPath must be at most 1024 characters."
        elif reason := reserved_mount_path(cleaned):
            problems[f"{where}.mountPath"] = reason
        elif not _storable(cleaned) or ":" in cleaned:
            problems[f"{where}.mountPath"] = "mountPath may not contain NUL or ':'."
        elif cleaned in paths:
            problems[f"{where}.mountPath"] = f"{cleaned} is mounted twice."
        if not isinstance(read_only, bool):
            problems[f"{where}.readOnly"] = "readOnly must be true or false."
        if isinstance(name, str):
            names.add(name)
        paths.add(cleaned)
        mounts.append({"name": name, "mountPath": cleaned, "readOnly": read_only})
    if problems:
        return [], problems
    return sorted(mounts, key=lambda m: (m["name"], m["mountPath"])), {}


SSH_USERNAME = "runtime"
SSH_PORT = 2222


def ssh(value: object) -> tuple[dict, dict[str, str]]:
    """`ssh: {enabled, keys?}` normalised ({} when off; keys de-duplicated, None meaning every
    key the tenant has) and its problems. Whether the keys exist is the order's to check."""
    if value is None:
        return {}, {}
    if not isinstance(value, dict) or set(value) - {"enabled", "keys"}:
        return {}, {"ssh": "ssh must be an object with enabled and keys."}
    enabled = value.get("enabled", False)
    if not isinstance(enabled, bool):
        return {}, {"ssh.enabled": "enabled must be true or false."}
    keys = value.get("keys")
    if not enabled:
        return ({}, {"ssh.keys": "keys need enabled: true."}) if keys else ({}, {})
    if keys is None:
        return {"enabled": True, "keys": None}, {}
    if not isinstance(keys, list) or not keys or len(keys) > MAX_ITEMS:
        return {}, {"ssh.keys": f"keys must name 1 to {MAX_ITEMS} of the tenant's SSH keys."}
    names: list[str] = []
    for index, name in enumerate(keys):
        if not isinstance(name, str) or not _LABEL.fullmatch(name):
            return {}, {f"ssh.keys[{index}]": "not an SSH key name (a DNS label)."}
        if name not in names:
            names.append(name)
    return {"enabled": True, "keys": names}, {}
