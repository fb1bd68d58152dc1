"""`make run`'s setup, in one Django process: migrations, the sample catalog, the demo users and
tenants, the GPUUnit CRD in each development cluster, the second region's registration and the
demo API keys. Each step is the management command an operator would run (`call_command`), so
what `make run` sets up is what those commands do; running them in one process spares a Django
start (about 3 s of CPU) per step.

Run by devstack/launcher.py with the stack's environment:
`python -m devstack.bootstrap DATA_ROOT [--second-cluster]`."""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path

import django
from django.core.management import call_command

from devstack.launcher import SAMPLE_CATALOG, SECOND_CLUSTER, SECOND_CLUSTER_PROFILE

# The demo tenants' keys, kept in the data folder so scripts and curl can use them.
KEY_FILES = {"default": "demo-api-key", "ops": "operator-api-key"}


def _captured(*args: str) -> str:
    """A command's output, also printed (what `make run` shows is what the command says)."""
    out = io.StringIO()
    call_command(*args, stdout=out)
    print(out.getvalue(), end="", flush=True)
    return out.getvalue()


def _register_second_cluster(data_root: Path) -> None:
    """eu-west in the registry as an operator would add it (a ClusterProfile imported, its
    kubeconfig found in CLUSTER_CREDENTIALS_DIR: the data folder), enabled the first time, and
    its GPUUnit CRD."""
    profile = data_root / "clusterprofiles.yaml"
    profile.write_text(json.dumps(SECOND_CLUSTER_PROFILE))
    args = ["import_clusters", str(profile)]
    new = _captured(*args, "--dry-run").startswith("created")
    call_command(*args, *(["--enable"] if new else []))
    call_command("install_crd", "--cluster", SECOND_CLUSTER)


def _ensure_key(tenant: str, path: Path) -> None:
    """A key for the demo tenant, made once (the file outlives the stack)."""
    if path.exists():
        return
    out = io.StringIO()
    call_command("create_api_key", "--tenant", tenant, "--name", "make run", stdout=out)
    path.write_text(out.getvalue().strip().splitlines()[-1] + "\n")
    path.chmod(0o600)


def bootstrap(data_root: Path, *, second_cluster: bool) -> None:
    call_command("migrate", "--noinput")
    call_command("import_catalog", str(SAMPLE_CATALOG), "--if-empty")
    call_command("ensure_superuser", "--username", "admin")
    call_command("ensure_tenant_user", "--username", "demo", "--tenant", "default")
    call_command("install_crd")
    if second_cluster:
        _register_second_cluster(data_root)
    call_command(
        "create_tenant",
        "ops",
        "--namespace",
        "ops-system",
        "--operator",
        "--display-name",
        "Operations",
        "--if-missing",
    )
    for tenant, file_name in KEY_FILES.items():
        _ensure_key(tenant, data_root / file_name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.bootstrap")
    parser.add_argument("data_root", type=Path)
    parser.add_argument("--second-cluster", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()
    bootstrap(args.data_root.resolve(), second_cluster=args.second_cluster)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
