"""Concurrent identical orders through a real threaded HTTP server: one unit, one claim, one pod."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from catalog.tests.factories import PackageFactory
from controlplane import kube
from runtime.models import GPUUnit, Operation
from runtime.tests.factories import key_for
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


def post(url: str, key: str, payload: dict) -> tuple[int, dict, str | None]:
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response), response.headers.get("Idempotent-Replayed")
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc), None


def test_fifty_identical_concurrent_creates_make_one_unit(live_server, tenant):
    PackageFactory()
    key = key_for(tenant)
    payload = {
        "operationID": "burst-1",
        "name": "burst",
        "packageID": "gpu-rtx3080-2x-cpu10-mem40g",
        "image": "python:3.12",
    }
    url = f"{live_server.url}/api/v1/gpu-units"
    try:
        with ThreadPoolExecutor(max_workers=50) as pool:
            results = list(pool.map(lambda _: post(url, key, payload), range(50)))
        statuses = sorted(status for status, _body, _replayed in results)
        assert statuses == [200] * 49 + [201]
        assert all(replayed == "true" for status, _b, replayed in results if status == 200)
        assert len({body["data"]["createdAt"] for _s, body, _r in results}) == 1
        assert GPUUnit.objects.count() == 1
        assert Operation.objects.count() == 1

        wait_for_phase(GPUUnit.objects.get(), "Running")
        selector = "runtime.lokiwager.io/unit=burst"
        for kind in (kube.GPUUNIT, kube.RESOURCECLAIM, kube.POD):
            assert (
                len(kube.list_objects(kind, namespace=tenant.namespace, label_selector=selector))
                == 1
            )
    finally:
        remove_namespace_objects(tenant.namespace)
