"""A Python client generated from /api/schema/ by openapi-python-client works as written: it
imports, orders a unit, sees it Running, stops it and deletes it, over real HTTP against the
stack (a worker, the simulated cluster; the reconcile run as beat would)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from catalog.tests.factories import PackageFactory
from runtime.control import reconcile
from runtime.models import GPUUnit
from runtime.tasks import sweep_operations
from runtime.tests.helpers import remove_namespace_objects, wait_until
from tenancy.tests.factories import TenantFactory, key_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "gpu_client"


@pytest.fixture
def generated(client, tmp_path: Path) -> Iterator[ModuleType]:
    """The client package generated from the schema this server serves, importable."""
    schema = tmp_path / "schema.yaml"
    schema.write_bytes(client.get("/api/schema/").content)
    config = tmp_path / "config.yaml"
    config.write_text(f"post_hooks: []\npackage_name_override: {PACKAGE}\n")
    subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(schema),
            "--config",
            str(config),
            "--meta",
            "none",
            "--output-path",
            str(tmp_path / PACKAGE),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def operation(package: ModuleType, name: str) -> Any:
    return importlib.import_module(f"{package.__name__}.api.{name}")


def until(what: str, check: Callable[[], Any]) -> Any:
    """Sweep and reconcile as beat would until `check()` answers something true."""

    def settled() -> Any:
        sweep_operations()
        reconcile.reconcile_units()
        return check()

    return wait_until(settled, what, timeout=90.0)


def test_every_generated_module_imports(generated):
    api = importlib.import_module(f"{PACKAGE}.api")
    modules = [m.name for m in pkgutil.walk_packages(api.__path__, f"{PACKAGE}.api.")]
    assert f"{PACKAGE}.api.units.units_create" in modules
    for name in modules:
        importlib.import_module(name)


def test_a_generated_client_orders_runs_stops_and_deletes_a_unit(generated, live_server, cluster):
    tenant = TenantFactory(quota_cpu="100", quota_memory="1Ti", quota_claims=10)
    package = PackageFactory(
        id="gpu-h100-1x-sdk",
        spec_name="h100",
        cpu="2",
        memory="4Gi",
        gpu=1,
        count=1,
        device_class_name="nvidia-h100",
    )
    models = importlib.import_module(f"{PACKAGE}.models")
    api = generated.AuthenticatedClient(base_url=live_server.url, token=key_for(tenant))
    units = "units.units_"
    try:
        created = operation(generated, units + "create").sync_detailed(
            client=api,
            body=models.CreateUnitRequest(
                operation_id="sdk-1", name="sdk", package_id=package.id, image="busybox"
            ),
        )
        assert created.status_code == 201, created.content
        assert created.parsed.data.name == "sdk"

        def phase() -> str:
            got = operation(generated, units + "get").sync(name="sdk", client=api)
            return got.data.phase.value

        until("Running", lambda: phase() == "Running")
        stopped = operation(generated, units + "stop").sync_detailed(
            name="sdk", client=api, body=models.ActionRequest(operation_id="sdk-stop")
        )
        assert stopped.status_code == 202, stopped.content
        until("Stopped", lambda: phase() == "Stopped")
        deleted = operation(generated, units + "delete").sync_detailed(name="sdk", client=api)
        assert deleted.status_code == 202, deleted.content
        until(
            "Terminated",
            lambda: GPUUnit.objects.filter(name="sdk", phase="Terminated").exists(),
        )
        # An error answer is parsed into the envelope's model.
        missing = operation(generated, units + "get").sync(name="nope", client=api)
        assert isinstance(missing, models.Error)
        assert missing.error.code == "not_found"
    finally:
        # Its keep-alive connection would hold a live-server thread, and that thread's
        # database connection, past the test.
        api.get_httpx_client().close()
        remove_namespace_objects(tenant.namespace)
