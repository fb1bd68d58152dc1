"""Every field of every request body, nested ones and list items included, given each JSON type
it does not take (and every object given a member it does not declare): a 400 in the error
envelope naming the field's path, never a 500, and nothing stored (issue 25 item 8). The cases
come from the serializers that declare the bodies, walked alongside a valid body of each: a
field added to a serializer is covered without a new case."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from rest_framework import serializers

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from runtime import spec
from runtime.api.serializers import (
    ActionSerializer,
    CreateSecretSerializer,
    CreateStorageSerializer,
    CreateUnitSerializer,
    UpdateUnitSerializer,
)
from runtime.models import (
    GPUStorage,
    GPUUnit,
    Operation,
    OperationStatus,
    TenantSecret,
    UnitPhase,
)
from tenancy import services as tenancy_services
from tenancy.models import SSHKey
from tenancy.serializers import CreateSSHKeySerializer
from tenancy.tests.factories import TenantFactory
from tenancy.tests.test_sshkeys import ED25519
from tests.endpoints import client_for

# One value of each JSON type.
WRONG: dict[str, Any] = {
    "object": {},
    "array": [],
    "string": "x",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "null": None,
}

UNDECLARED = "notDeclared"  # a member no object of any body has

ORDER = {
    "operationID": "typed-1",
    "name": "typed",
    "packageID": ARTICLE_PACKAGE_ID,
    "image": "python:3.12",
    "template": {
        "command": ["python", "-m", "http.server"],
        "args": ["8080"],
        "env": [
            {"name": "MODE", "value": "serve"},
            {"name": "HF_TOKEN", "secretRef": {"name": "hf", "key": "token"}},
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    },
    "access": {"primaryPort": "http", "scheme": "http"},
    "storageMounts": [{"name": "data", "mountPath": "/data", "readOnly": False}],
    "ssh": {"enabled": True, "keys": ["laptop"]},
    "stopAfter": "8h",
}
UPDATE = {key: ORDER[key] for key in UpdateUnitSerializer().fields if key in ORDER}
UPDATE["operationID"] = "typed-2"
STORAGE = {
    "name": "cache",
    "size": "10Gi",
    "storageClass": "standard",
    "accessMode": "ReadWriteOnce",
}
SSH_KEY = {"name": "desktop", "publicKey": ED25519}
SECRET = {"name": "other", "data": {"token": "value"}}
ACTION = {"operationID": "stop-1"}


def json_types(field: serializers.Field) -> set[str]:
    """The JSON types `field` takes, as its declaration says."""
    if isinstance(field, serializers.ListField):
        kinds = {"array"}
    elif isinstance(field, serializers.Serializer | serializers.DictField):
        kinds = {"object"}
    elif isinstance(field, serializers.BooleanField):
        kinds = {"boolean"}
    elif isinstance(field, serializers.IntegerField):
        kinds = {"integer"}
    elif isinstance(field, serializers.CharField | serializers.ChoiceField):
        kinds = {"string"}
    else:
        raise AssertionError(f"no JSON type known for {field!r}")
    return kinds | ({"null"} if field.allow_null else set())


Where = tuple[str | int, ...]  # keys and indexes from the body down to a field


class Case(NamedTuple):
    where: Where
    wrong: str  # a key of WRONG

    @property
    def path(self) -> str:
        """The API's name for the field: `template.ports[0].protocol`."""
        text = ""
        for part in self.where:
            text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
        return text

    def body(self, valid: dict) -> dict:
        def put(value: Any, where: Where) -> Any:
            if not where:
                return WRONG[self.wrong]
            head, rest = where[0], where[1:]
            if isinstance(value, list):
                assert isinstance(head, int)
                return [put(v, rest) if i == head else v for i, v in enumerate(value)]
            return {**value, head: put(value.get(head), rest)}

        return put(valid, self.where)

    def __str__(self) -> str:
        return f"{self.path}={self.wrong}"


def cases(field: serializers.Field, value: Any, where: Where = ()) -> Iterator[Case]:
    """Each JSON type `field` (at `where`, holding `value` in the valid body) does not take, and
    the same for every field and list item inside it; in every object, a member it does not
    declare."""
    if where:
        right = json_types(field)
        yield from (Case(where, wrong) for wrong in WRONG if wrong not in right)
    if value is None:
        return
    if isinstance(field, serializers.ListField):
        for index, item in enumerate(value):
            yield from cases(field.child, item, (*where, index))
    elif isinstance(field, serializers.DictField):
        for key, item in value.items():
            yield from cases(field.child, item, (*where, key))
    elif isinstance(field, serializers.Serializer):
        yield Case((*where, UNDECLARED), "string")
        for name, member in field.fields.items():
            yield from cases(member, value.get(name), (*where, name))


def patch_cases() -> Iterator[Case]:
    """An update's cases. A merge patch's nested values are checked once merged into the unit,
    as the unit's spec (spec.UnitSpecSerializer) declares them; null clears a member of an
    object (the top-level ones that may be cleared, and any below them), but not a list's
    item, since a patch replaces a list whole."""
    patch_fields = UpdateUnitSerializer().fields
    merged_fields = spec.UnitSpecSerializer().fields
    yield Case((UNDECLARED,), "string")
    for name, field in patch_fields.items():
        for case in cases(merged_fields.get(name, field), UPDATE.get(name), (name,)):
            clears = field.allow_null or len(case.where) > 1
            if case.wrong == "null" and clears and all(isinstance(p, str) for p in case.where):
                continue
            yield case


ORDER_CASES = list(cases(CreateUnitSerializer(), ORDER))
UPDATE_CASES = list(patch_cases())


@pytest.fixture
def owner(db):
    """A tenant with what the valid bodies name: the package, a secret, a storage, a key."""
    PackageFactory(article=True)
    tenant = TenantFactory()
    TenantSecret.objects.create(tenant=tenant, name="hf", keys=["token"])
    GPUStorage.objects.create(tenant=tenant, name="data", size="10Gi", size_bytes=10 * 2**30)
    tenancy_services.add_ssh_key(tenant=tenant, name="laptop", public_key=ED25519)
    return tenant


def running_unit(client) -> str:
    """The unit of ORDER, ordered and running (its create done; no worker here); its etag."""
    created = client.post("/api/v1/gpu-units", ORDER, format="json")
    assert created.status_code == 201, created.json()
    GPUUnit.objects.filter(name="typed").update(
        phase=UnitPhase.RUNNING, unit_k8s_uid="00000000-0000-0000-0000-000000000001"
    )
    Operation.objects.update(status=OperationStatus.SUCCEEDED)
    return created.json()["data"]["etag"]


def assert_names_field(response, case: Case) -> None:
    assert response.status_code == 400, (str(case), response.status_code, response.content)
    error = response.json()["error"]
    assert error["code"] == "invalid_request", (str(case), error)
    assert case.path in error["details"]["fields"], (str(case), error)


def test_the_valid_bodies_are_valid(owner):
    client = client_for(owner)
    etag = running_unit(client)
    patch = {**UPDATE, "template": {**ORDER["template"], "args": ["9090"]}}
    updated = client.patch("/api/v1/gpu-units/typed", patch, format="json", HTTP_IF_MATCH=etag)
    assert updated.status_code == 202, updated.json()
    for serializer, body in (
        (CreateStorageSerializer, STORAGE),
        (CreateSSHKeySerializer, SSH_KEY),
        (CreateSecretSerializer, SECRET),
        (ActionSerializer, ACTION),
    ):
        assert serializer(data=body).is_valid(), (serializer, body)


@pytest.mark.parametrize("case", ORDER_CASES, ids=str)
def test_an_order_with_a_wrong_type_anywhere_is_a_400_naming_the_field(owner, case):
    response = client_for(owner).post("/api/v1/gpu-units", case.body(ORDER), format="json")
    assert_names_field(response, case)
    assert not GPUUnit.objects.exists()
    assert not Operation.objects.exists()


@pytest.mark.parametrize("case", UPDATE_CASES, ids=str)
def test_an_update_with_a_wrong_type_anywhere_is_a_400_naming_the_field(owner, case):
    client = client_for(owner)
    etag = running_unit(client)
    response = client.patch(
        "/api/v1/gpu-units/typed", case.body(UPDATE), format="json", HTTP_IF_MATCH=etag
    )
    assert_names_field(response, case)
    unit = GPUUnit.objects.get(name="typed")
    assert unit.generation == 1
    assert list(Operation.objects.values_list("operation_id", flat=True)) == ["typed-1"]


OTHER_BODIES = [
    ("/api/v1/gpu-storages", CreateStorageSerializer(), STORAGE),
    ("/api/v1/ssh-keys", CreateSSHKeySerializer(), SSH_KEY),
    ("/api/v1/secrets", CreateSecretSerializer(), SECRET),
    ("/api/v1/gpu-units/typed/stop", ActionSerializer(), ACTION),
]
OTHER_CASES = [
    (url, valid, case)
    for url, serializer, valid in OTHER_BODIES
    for case in cases(serializer, valid)
]


@pytest.mark.parametrize(
    ("url", "valid", "case"), OTHER_CASES, ids=[f"{u} {c}" for u, _, c in OTHER_CASES]
)
def test_other_bodies_with_a_wrong_type_anywhere_are_a_400_naming_the_field(
    owner, url, valid, case
):
    response = client_for(owner).post(url, case.body(valid), format="json")
    assert_names_field(response, case)
    assert GPUStorage.objects.count() == 1
    assert SSHKey.objects.count() == 1
    assert TenantSecret.objects.count() == 1
    assert not Operation.objects.exists()
