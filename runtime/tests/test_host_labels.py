"""Unit host labels are unique among live units (issue 25, item 7): an order stores its unit's
label; a label a live unit holds is never given to another unit, which gets the next candidate
(so crafted names whose computed labels collide still get URLs of their own); a Terminated
unit's label may be given again; the URL a unit shows and the host its route publishes are the
stored label's; and the migration gives existing units the label their URL already had."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.db import IntegrityError, transaction

from catalog.tests.factories import PackageFactory
from controlplane import kube
from runtime import access, manifests, orders
from runtime.control.provisioning import ensure_tenant_namespace, provision_access
from runtime.errors import NameConflict
from runtime.models import GPUUnit, UnitPhase
from runtime.tests.factories import UnitFactory
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

DOMAIN = "units.gpu.example.test"
GATEWAY = access.AccessConfig(domain=DOMAIN, gateway="gateway-system/gpu-gateway")
HTTP = {
    "template": {"ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]},
    "access": {"primaryPort": "http", "scheme": "http"},
}


@pytest.fixture
def package():
    return PackageFactory(article=True)


@pytest.fixture
def weak_hash(monkeypatch):
    """Labels with a 1-character hash (5 bits): crafted names collide in a few dozen tries, so
    the collisions below are real ones, found by search, not stubbed."""
    monkeypatch.setattr(access, "_HASH_CHARS", 1)


@pytest.fixture
def rivals(db):
    """Two tenants whose namespaces share the 12 characters a long unit name's label keeps."""
    return (
        TenantFactory(slug="rival-one", namespace="collide-team-one"),
        TenantFactory(slug="rival-two", namespace="collide-team-two"),
    )


def order(tenant, name: str, package, operation_id: str = "") -> GPUUnit:
    return orders.create_unit(
        tenant=tenant,
        operation_id=operation_id or f"op-{name}",
        name=name,
        package_id=package.id,
        image="python:3.12",
        **HTTP,
    ).unit


def colliding_names(first_namespace: str, second_namespace: str) -> tuple[str, str]:
    """Two 54-character unit names, one per namespace, with the same computed label: the cut
    keeps the first 48 characters of the unit and 12 of the namespace, alike for both, so only
    the hash differs, and a search over the tails finds names where it does not."""
    first = f"crafted-{'u' * 40}000000"
    wanted = access.host_label(first_namespace, first)
    for n in range(1, 100_000):
        second = f"crafted-{'u' * 40}{n:06d}"
        if access.host_label(second_namespace, second) == wanted:
            return first, second
    raise AssertionError("no collision found")


def next_free(namespace: str, name: str, taken: str) -> str:
    return next(
        label
        for candidate in range(1, orders.HOST_LABEL_CANDIDATES + 1)
        if (label := access.host_label(namespace, name, candidate)) != taken
    )


@pytest.mark.usefixtures("weak_hash")
def test_units_whose_labels_collide_get_different_labels_and_urls_when_ordered(package, rivals):
    one, two = rivals
    first_name, second_name = colliding_names(one.namespace, two.namespace)
    computed = access.host_label(one.namespace, first_name)
    assert access.host_label(two.namespace, second_name) == computed  # the crafted collision

    first = order(one, first_name, package)
    second = order(two, second_name, package)

    assert first.host_label == computed
    assert second.host_label == next_free(two.namespace, second_name, taken=computed)
    stored = GPUUnit.objects.filter(pk__in=[first.pk, second.pk]).order_by("pk")
    urls = [access.for_unit(unit, GATEWAY)["url"] for unit in stored]
    assert urls == [f"https://{first.host_label}.{DOMAIN}", f"https://{second.host_label}.{DOMAIN}"]
    assert urls[0] != urls[1]
    # The retries the collision took leave a replay a replay and a taken name a conflict.
    replay = orders.create_unit(
        tenant=two,
        operation_id=f"op-{second_name}",
        name=second_name,
        package_id=package.id,
        image="python:3.12",
        **HTTP,
    )
    assert (replay.created, replay.unit.pk) == (False, second.pk)
    with pytest.raises(NameConflict):
        order(two, second_name, package, operation_id="op-again")
    assert GPUUnit.objects.count() == 2


def test_a_live_unit_s_label_is_refused_to_another_live_unit_but_a_terminated_one_s_is_not():
    holder = UnitFactory(host_label="shared-label", phase=UnitPhase.RUNNING)
    with pytest.raises(IntegrityError) as refused, transaction.atomic():
        UnitFactory(host_label="shared-label", phase=UnitPhase.RUNNING)
    assert refused.value.__cause__.diag.constraint_name == orders.HOST_LABEL_CONSTRAINT

    GPUUnit.objects.filter(pk=holder.pk).update(phase=UnitPhase.TERMINATED)
    reuser = UnitFactory(host_label="shared-label", phase=UnitPhase.RUNNING)
    labels = GPUUnit.objects.filter(pk__in=[holder.pk, reuser.pk]).values_list(
        "host_label", flat=True
    )
    assert list(labels) == ["shared-label", "shared-label"]
    # Rows not written by an order have no label, and any number of them may lack one.
    UnitFactory.create_batch(2, phase=UnitPhase.RUNNING)


def test_an_order_gives_a_terminated_unit_s_label_again(package):
    tenant = TenantFactory()
    earlier = order(tenant, "demo-instance", package, operation_id="op-1")
    GPUUnit.objects.filter(pk=earlier.pk).update(phase=UnitPhase.TERMINATED)
    later = order(tenant, "demo-instance", package, operation_id="op-2")
    assert later.host_label == earlier.host_label
    assert later.host_label == access.host_label(tenant.namespace, "demo-instance")


@pytest.mark.usefixtures("weak_hash")
def test_the_route_publishes_the_stored_label(package, rivals, cluster, settings):
    settings.ACCESS_DOMAIN = DOMAIN
    settings.ACCESS_GATEWAY = ""
    settings.ACCESS_INGRESS_CLASS = "nginx"
    one, two = rivals
    first_name, second_name = colliding_names(one.namespace, two.namespace)
    order(one, first_name, package)
    second = order(two, second_name, package)
    assert second.host_label != access.host_label(two.namespace, second_name)
    ensure_tenant_namespace(two)
    # The unit's GPUUnit, their owner: the cluster's garbage collector removes what a missing
    # one (by kind, name and uid) owns.
    contract = second.contract(request_hash="")
    owner = kube.create(kube.GPUUNIT, two.namespace, manifests.build_gpuunit(contract))
    try:
        provision_access(contract, owner_uid=owner["metadata"]["uid"])
        ingress = kube.get(
            kube.INGRESS, two.namespace, manifests.object_name(second_name, manifests.Part.ROUTE)
        )
        assert [rule["host"] for rule in ingress["spec"]["rules"]] == [
            f"{second.host_label}.{DOMAIN}"
        ]
    finally:
        for kind in (kube.INGRESS, kube.SERVICE, kube.NETWORKPOLICY):
            for obj in kube.list_objects(kind, namespace=two.namespace):
                if obj["metadata"]["name"].startswith("unit-"):
                    kube.delete(kind, two.namespace, obj["metadata"]["name"])
        kube.delete(kube.GPUUNIT, two.namespace, owner["metadata"]["name"])


# Two names whose labels collided under the 6-character hash units had before this migration
# (30 bits: found in 23,494 tries), and the labels today's URLs have.
LEGACY_NAMES = (
    "legacy-unit-uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu00000009420",
    "legacy-unit-uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu00000023494",
)
LEGACY_LABEL = "legacy-unit-uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu-legacy-tenan-e4dtqw"
SEED_LABEL = "demo-instance-seed-tenant-ns-n4rmqc"


def test_the_migration_keeps_each_unit_s_url_and_moves_a_live_unit_that_shared_one():
    migration = importlib.import_module("runtime.migrations.0013_gpuunit_host_label")
    legacy = TenantFactory(slug="legacy", namespace="legacy-tenant-ns")
    seed = TenantFactory(slug="seed", namespace="seed-tenant-ns")
    ended = UnitFactory(tenant=seed, name="demo-instance", phase=UnitPhase.TERMINATED)
    live = UnitFactory(tenant=seed, name="demo-instance", phase=UnitPhase.RUNNING)
    first, second = (UnitFactory(tenant=legacy, name=name) for name in LEGACY_NAMES)

    migration.fill_host_labels(apps, None)

    labels = dict(GPUUnit.objects.values_list("pk", "host_label"))
    # A Terminated unit and a live one of the same name share a label: only live ones count.
    assert labels[ended.pk] == labels[live.pk] == SEED_LABEL
    assert labels[first.pk] == LEGACY_LABEL
    # The later of two live units that shared a URL takes the next label an order would give.
    assert labels[second.pk] == access.host_label(legacy.namespace, LEGACY_NAMES[1], 1)
    assert labels[second.pk] != LEGACY_LABEL
