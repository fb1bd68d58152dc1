"""Units that read tenant secrets: `template.env[].secretRef` checked (value or secretRef, a
secret and key the tenant has), carried into the pod as `valueFrom.secretKeyRef`, and the value
itself nowhere the control plane writes or shows: not the GPUUnit, events, logs, API answers,
dashboard pages or exports."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import Client

from catalog import services as catalog_services
from catalog.tests.factories import PackageFactory
from controlplane import kube
from dashboard.forms import env_text, parse_env
from runtime import manifests, validation
from runtime.models import GPUUnit, Operation, UnitEvent, UnitPhase
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase
from tenancy.tests.factories import TenantFactory
from tests.endpoints import client_for

VALUE = "hf_s3cr3t-Zq7vW2-distinctive-value"
REF = {"name": "HF_TOKEN", "secretRef": {"name": "hf", "key": "token"}}
EVENT = kube.Kind("Event", "", "v1", "events")


def test_a_secret_reference_is_a_valid_env_entry():
    assert validation.template({"env": [REF, {"name": "A", "value": "b"}]}) == {}


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({**REF, "value": "x"}, "template.env[0].secretRef"),
        ({"name": "A", "secretRef": {"name": "hf"}}, "template.env[0].secretRef"),
        ({"name": "A", "secretRef": "hf/token"}, "template.env[0].secretRef"),
        (
            {"name": "A", "secretRef": {"name": "Bad_", "key": "k"}},
            "template.env[0].secretRef.name",
        ),
        ({"name": "A", "secretRef": {"name": "hf", "key": "a b"}}, "template.env[0].secretRef.key"),
        (
            {"name": "A", "secretRef": {"name": "hf", "key": "k", "x": 1}},
            "template.env[0].secretRef",
        ),
    ],
)
def test_a_bad_secret_reference_is_refused_naming_the_field(entry, field):
    assert field in validation.template({"env": [entry]})


def test_the_pod_reads_the_secret_by_reference_and_the_gpuunit_holds_only_it():
    contract = manifests.UnitContract(
        name="u",
        namespace="ns",
        tenant="t",
        operation_id="op",
        request_hash="h",
        package_id="p",
        spec_name="s",
        image="busybox",
        cpu="1",
        memory="1Gi",
        gpu=1,
        device_class_name="gpu.example.com",
        claim_name="unit-u-gpu",
        claim_request_name="gpu",
        count=1,
        env=[REF, {"name": "A", "value": "b"}],
    )
    env = manifests.build_pod(contract, owner_uid="uid")["spec"]["containers"][0]["env"]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "secret-hf", "key": "token"}},
    } in env
    assert {"name": "A", "value": "b"} in env
    assert manifests.build_gpuunit(contract)["spec"]["template"]["env"][0] == REF


def test_the_dashboard_shows_and_reads_back_a_reference_not_a_value():
    env = [REF, {"name": "A", "value": "b"}]
    text = env_text(env)
    assert "${secret:hf/token}" in text
    assert parse_env(text) == env


@pytest.fixture
def owner(cluster):
    """A tenant, its namespace (a secret is written into it before any unit), a package;
    all removed afterwards."""
    tenant = TenantFactory()
    kube.create(
        kube.NAMESPACE, None, manifests.build_namespace(tenant.namespace, tenant=tenant.slug)
    )
    yield tenant
    remove_namespace_objects(tenant.namespace)
    for secret in kube.list_objects(kube.SECRET, namespace=tenant.namespace):
        kube.delete(kube.SECRET, tenant.namespace, secret["metadata"]["name"])
    kube.delete(kube.NAMESPACE, None, tenant.namespace)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_worker")
def test_a_unit_reads_a_secret_whose_value_appears_nowhere_we_write(owner, caplog):
    caplog.set_level(logging.DEBUG)
    package = PackageFactory(id="secret-env-1x", spec_name="secret-env", gpu=1, count=1)
    client = client_for(owner)
    created = client.post(
        "/api/v1/secrets", {"name": "hf", "data": {"token": VALUE}}, format="json"
    )
    assert created.status_code == 201, created.json()
    order = {
        "operationID": "secret-env-1",
        "name": "reader",
        "packageID": package.id,
        "image": "busybox",
        "template": {"env": [REF, {"name": "PLAIN", "value": "visible"}]},
    }
    # A secret or key the tenant does not have is refused at order time, naming the field.
    for ref, field in (
        ({"name": "nope", "key": "token"}, "template.env[0].secretRef.name"),
        ({"name": "hf", "key": "nokey"}, "template.env[0].secretRef.key"),
    ):
        missing = {**order, "template": {"env": [{"name": "HF_TOKEN", "secretRef": ref}]}}
        refused = client.post("/api/v1/gpu-units", missing, format="json")
        assert refused.status_code == 400, refused.json()
        assert field in refused.json()["error"]["details"]["fields"]
    assert not GPUUnit.objects.filter(tenant=owner).exists()

    response = client.post("/api/v1/gpu-units", order, format="json")
    assert response.status_code == 201, response.json()
    unit = wait_for_phase(GPUUnit.objects.get(tenant=owner, name="reader"), UnitPhase.RUNNING)
    pod = kube.get(kube.POD, owner.namespace, manifests.pod_name_for("reader"))
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "secret-hf", "key": "token"}},
    } in pod["spec"]["containers"][0]["env"]
    # The secret is in use: deleting it would fail the unit's next start.
    in_use = client.delete("/api/v1/secrets/hf")
    assert in_use.status_code == 409
    assert in_use.json()["error"]["code"] == "secret_in_use"

    seen: dict[str, str] = {}
    gpuunit = kube.get(kube.GPUUNIT, owner.namespace, "reader")
    assert gpuunit["spec"]["template"]["env"][0] == REF
    seen["GPUUnit"] = json.dumps(gpuunit)
    seen["pod"] = json.dumps(pod)
    seen["kubernetes events"] = json.dumps(kube.list_objects(EVENT, namespace=owner.namespace))
    seen["unit row"] = json.dumps(
        list(GPUUnit.objects.filter(pk=unit.pk).values("template", "access", "message"))
    )
    seen["operations"] = json.dumps(
        list(Operation.objects.filter(tenant=owner).values()), default=str
    )
    seen["timeline"] = json.dumps(
        list(UnitEvent.objects.filter(unit=unit).values("reason", "message"))
    )
    for path in (
        "/api/v1/gpu-units",
        "/api/v1/gpu-units/reader",
        "/api/v1/gpu-units/reader/events",
        "/api/v1/operations/secret-env-1",
        "/api/v1/secrets",
        "/api/v1/secrets/hf",
        "/api/v1/quota",
    ):
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.content)
        seen[path] = answer.content.decode()
    assert "secretRef" in seen["/api/v1/gpu-units/reader"]
    user = owner.users.create(username="secret-env-user")
    browser = Client()
    browser.force_login(user)
    for page in (
        "/",
        "/units/",
        f"/units/{unit.uid}/",
        f"/units/{unit.uid}/live/",
        f"/units/{unit.uid}/edit/",
    ):
        html = browser.get(page)
        assert html.status_code == 200, page
        seen[page] = html.content.decode()
    assert "${secret:hf/token}" in seen[f"/units/{unit.uid}/edit/"]
    seen["catalog export"] = catalog_services.export_catalog()
    seen["logs"] = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    assert "visible" in seen["/api/v1/gpu-units/reader"]  # the grep can find a value
    leaks = [where for where, text in seen.items() if VALUE in text]
    assert not leaks, f"the secret's value appears in {leaks}"

    assert client.delete("/api/v1/gpu-units/reader").status_code == 202
    wait_for_phase(unit, UnitPhase.TERMINATED)
    assert client.delete("/api/v1/secrets/hf").status_code == 204
    package.delete()
