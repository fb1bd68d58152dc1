"""Beat's backstop a page at a time: the cursor and page arithmetic, the meters a page answers
for, and, against the simulated cluster, ticks that visit every unit once per cycle with
three list calls each, however many units the page holds."""

from __future__ import annotations

import itertools
import math
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from billing import ledger, periods
from billing.models import Meter, UsageRecord
from billing.tests.helpers import holding
from catalog.tests.factories import PackageFactory
from controlplane import kube
from runtime import lifecycle, manifests
from runtime.control import metering, reconcile
from runtime.control.provisioning import ensure_tenant_namespace, provision_unit
from runtime.control.reconcile import Page, page_of, page_selector
from runtime.models import GPUUnit, Operation, UnitPhase
from runtime.tests.factories import UnitFactory
from runtime.tests.helpers import remove_namespace_objects

DRA = {"allocated": True, "devices": [{"pool": "n", "device": "gpu-0"}]}


# ---------------------------------------------------------------------------- pure arithmetic


def test_a_page_ends_at_its_last_unit_when_more_follow():
    page = page_of(0, [3, 5, 8], 2)
    assert page == Page(after=0, upto=5)
    assert page.next_after == 5


def test_the_last_page_has_no_upper_bound_and_sends_the_cursor_back_to_the_start():
    assert page_of(5, [8], 2) == Page(after=5, upto=None)
    assert page_of(5, [8, 9], 2).next_after == 0  # exactly full, nothing beyond: no empty tick
    assert page_of(9, [], 2) == Page(after=9, upto=None)  # a cursor past every unit wraps


@pytest.mark.parametrize(("units", "size"), [(1, 2), (5, 2), (6, 2), (10, 3), (10, 10)])
def test_a_cycle_of_ticks_visits_every_unit_once_when_units_number_n(units, size):
    pks = list(range(7, 7 + 3 * units, 3))  # gaps, as rows of other phases leave
    after, visits, spans = 0, dict.fromkeys(pks, 0), []
    for _tick in range(math.ceil(units / size)):
        ahead = [pk for pk in pks if pk > after][: size + 1]
        page = page_of(after, ahead, size)
        for pk in ahead[:size]:
            visits[pk] += 1
        spans.append((page.after, page.upto))
        after = page.next_after
    assert after == 0, "the cycle did not end after ceil(units / size) ticks"
    assert set(visits.values()) == {1}
    # The spans tile every pk: each meter is answered for by exactly one page of a cycle.
    assert spans[0][0] == 0
    assert spans[-1][1] is None
    assert all(upto == following for (_, upto), (following, _) in itertools.pairwise(spans))


def test_the_page_selector_selects_our_objects_of_the_named_units():
    assert page_selector(["b", "a", "b"]) == (
        f"{manifests.OURS_SELECTOR},{manifests.LABEL_UNIT} in (a,b)"
    )


# ---------------------------------------------------------------------------- meters of a page


@pytest.mark.django_db
def test_a_page_closes_only_its_own_leftover_meters_and_on_its_second_sight(tenant):
    package = PackageFactory(article=True, price="0.36")
    # Within the last hour that has ended, so that inside's two minutes are one ledger row
    # whenever the test runs (two minutes across an hour's boundary are two).
    earlier = periods.floor_hour(timezone.now()) - timedelta(minutes=30)
    running = UnitFactory(tenant=tenant, name="running", package=package, phase=UnitPhase.RUNNING)
    inside = UnitFactory(tenant=tenant, name="inside", package=package, phase=UnitPhase.TERMINATED)
    outside = UnitFactory(
        tenant=tenant, name="outside", package=package, phase=UnitPhase.TERMINATED
    )
    for unit in (running, inside, outside):  # inside's and outside's pods ended unobserved
        ledger.open_meter(holding(unit, DRA), at=earlier)
    ledger.mark_seen([inside.uid, outside.uid], at=earlier + timedelta(minutes=2))

    # The page reconciled `running` (its meter is its own business); `inside` is in its span
    # but was not reconciled (ended): the first sight only marks it, the next one closes it.
    assert metering.settle_unreconciled([running], span=(0, inside.pk)) == 0
    assert metering.settle_unreconciled([running], span=(0, inside.pk)) == 1
    assert set(Meter.objects.values_list("unit_name", flat=True)) == {"running", "outside"}
    (row,) = UsageRecord.objects.filter(unit_uid=inside.uid)
    assert row.end == earlier + timedelta(minutes=2)

    # Its own page (the last of the cycle) does the same for `outside`.
    assert metering.settle_unreconciled([], span=(inside.pk, None)) == 0
    assert metering.settle_unreconciled([], span=(inside.pk, None)) == 1
    assert set(Meter.objects.values_list("unit_name", flat=True)) == {"running"}


# ---------------------------------------------------------------------------- ticks on the cluster


@pytest.fixture
def paged(tenant, cluster, settings):
    """Two units a page, the cursor at the start, and the tenant's objects removed after."""
    settings.RECONCILE_PAGE_SIZE = 2
    cache.delete(reconcile.page_cursor_key(settings.CLUSTER_NAME))
    ensure_tenant_namespace(tenant)
    yield
    cluster.faults.clear()
    cache.delete(reconcile.page_cursor_key(settings.CLUSTER_NAME))
    remove_namespace_objects(tenant.namespace)


def pod_phase(unit: GPUUnit) -> str:
    pod = kube.get(kube.POD, unit.namespace, manifests.pod_name_for(unit.name)) or {}
    return (pod.get("status") or {}).get("phase", "")


def provisioned(tenant, package, count: int) -> list[GPUUnit]:
    """Units whose objects run while their rows still say Provisioning (behind their
    objects, as when the observer missed every event)."""
    units = []
    for i in range(count):
        unit = UnitFactory(tenant=tenant, name=f"paged-{i}", package=package, image="busybox")
        operation = Operation.objects.create(
            tenant=tenant,
            operation_id=f"op-{unit.name}",
            kind="create",
            request_hash="x" * 64,
            unit=unit,
        )
        lifecycle.recount_usage()
        provision_unit(operation_pk=operation.pk)
        units.append(unit)
    deadline = time.monotonic() + 60
    for unit in units:
        while pod_phase(unit) != "Running":
            assert time.monotonic() < deadline, f"the pod of {unit} did not run"
            time.sleep(0.1)
    assert {u.phase for u in GPUUnit.objects.filter(pk__in=[u.pk for u in units])} == {
        UnitPhase.PROVISIONING
    }
    return units


def one_gpu_package():
    return PackageFactory(gpu=1, count=1, cpu="4", memory="8Gi", spec_name="gpu.rtx3080.1x")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("paged")
def test_three_ticks_of_two_units_visit_each_of_six_units_once_when_rows_are_behind(tenant):
    units = provisioned(tenant, one_gpu_package(), 5)
    # Its objects gone: the page that comes to it ends it. Accepted (no objects yet): no page.
    ending = UnitFactory(tenant=tenant, name="ending", phase=UnitPhase.TERMINATING)
    accepted = UnitFactory(tenant=tenant, name="accepted", phase=UnitPhase.ACCEPTED)

    # The selector of a page selects its units' objects only (`in (...)` as the API server).
    selector = page_selector(u.name for u in units[:2])
    listed = {o["metadata"]["name"] for o in kube.list_objects(kube.POD, label_selector=selector)}
    assert listed == {manifests.pod_name_for(u.name) for u in units[:2]}

    def visited() -> dict[str, object]:
        return dict(GPUUnit.objects.filter(tenant=tenant).values_list("name", "last_sync_at"))

    pages = [units[0:2], units[2:4], units[4:5]]
    for tick, page in enumerate(pages):
        before = visited()
        result = reconcile.reconcile_page()
        after = visited()
        assert {name for name in after if after[name] != before[name]} == {u.name for u in page}
        assert result.changed == len(page)
        phases = dict(GPUUnit.objects.filter(tenant=tenant).values_list("name", "phase"))
        caught_up = {u.name for cycle_page in pages[: tick + 1] for u in cycle_page}
        assert {name for name, phase in phases.items() if phase == UnitPhase.RUNNING} == caught_up
    ending.refresh_from_db()
    accepted.refresh_from_db()
    assert ending.phase == UnitPhase.TERMINATED  # in the third page, beside units[4]
    assert (accepted.phase, accepted.last_sync_at) == (UnitPhase.ACCEPTED, None)
    assert cache.get(reconcile.page_cursor_key(settings.CLUSTER_NAME)) == 0

    # The next cycle starts over with the first page, now in step: nothing to change.
    before = visited()
    assert reconcile.reconcile_page().changed == 0
    after = visited()
    assert {name for name in after if after[name] != before[name]} == {u.name for u in units[:2]}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("paged")
def test_a_tick_makes_three_list_calls_when_its_page_holds_one_unit_or_a_thousand(
    tenant, cluster, settings
):
    (unit,) = provisioned(tenant, one_gpu_package(), 1)
    reconcile.reconcile_units()  # in step: a tick has nothing to write to the cluster
    cluster.requests.clear()
    settings.RECONCILE_PAGE_SIZE = 1
    reconcile.reconcile_page()
    one = [(e.verb, e.resource) for e in cluster.requests.entries()]

    # A thousand more (twice the default page), of names as long as a unit's can be (a 57 kB
    # selector in the URL), whose objects were deleted behind our back and that show Failed.
    GPUUnit.objects.bulk_create(
        UnitFactory.build(
            tenant=tenant,
            name=f"{'x' * 48}-{i:05d}",
            phase=UnitPhase.FAILED,
            unit_k8s_uid=f"gone-{i}",
        )
        for i in range(1_000)
    )
    settings.RECONCILE_PAGE_SIZE = 1_001
    cache.delete(reconcile.page_cursor_key(settings.CLUSTER_NAME))
    cluster.requests.clear()
    result = reconcile.reconcile_page()
    many = [(e.verb, e.resource) for e in cluster.requests.entries()]

    assert result.observed == 1_001
    kinds = sorted(kind.plural for kind in reconcile.UNIT_KINDS)
    assert sorted(resource.split(".")[0] for _, resource in one) == kinds
    assert one == many
    assert {verb for verb, _ in one} == {"list"}
    assert GPUUnit.objects.get(pk=unit.pk).phase == UnitPhase.RUNNING


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("paged")
def test_a_tick_whose_lists_fail_leaves_the_cursor_for_the_next_when_the_cluster_errs(
    tenant, cluster
):
    units = provisioned(tenant, one_gpu_package(), 3)
    cluster.faults.set(verb="list", error_rate=1.0, status=500)
    assert reconcile.reconcile_page().skipped
    assert not cache.get(reconcile.page_cursor_key(settings.CLUSTER_NAME))
    cluster.faults.clear()
    reconcile.reconcile_page()
    assert cache.get(reconcile.page_cursor_key(settings.CLUSTER_NAME)) == units[1].pk
    assert GPUUnit.objects.get(pk=units[0].pk).phase == UnitPhase.RUNNING
