"""Two clusters behind one control plane, over the real stack: the session's development
cluster (the process's own, `default`, region `default`) and a second one (`west-1`, region
`eu-west`, behind its fault proxy), each with its own observer (one `manage.py observe`
watches both), inventory mirror and Celery queue (a worker of its own takes
`cluster.west-1`). An order pinned to a region lands in that region's cluster, and its
objects are there and nowhere else."""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path

import pytest
from django.utils import timezone

from billing.models import Meter, UsageRecord
from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from conftest import start_observer, start_worker, stop_worker
from controlplane import kube
from devstack.cluster import DevCluster
from inventory import clusters as inventory_clusters
from inventory import selectors as inventory_selectors
from inventory import sync
from inventory.models import Cluster, PackageAvailability
from runtime import lifecycle, manifests, tasks, usage_audit
from runtime.control import provisioning, volumes
from runtime.control.observer import read_status
from runtime.control.provisioning import install_crd
from runtime.models import GPUStorage, GPUUnit, UnitEvent, UnitPhase
from runtime.tests.helpers import order_unit, wait_until

pytestmark = [
    pytest.mark.long,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("celery_worker"),
]

WEST = "west-1"
DEV_GATEWAY = Path(__file__).resolve().parents[2] / "k8s" / "components" / "dev-gateway"


@pytest.fixture
def west(cluster, cluster_credentials, tmp_path):
    """The second cluster, registered and enabled, with the GPUUnit CRD, and what watches and
    works it: an observer of every enabled cluster and a worker of west's queue."""
    dev = DevCluster(
        tmp_path / WEST,
        name=WEST,
        topology={
            "generate": {"nodes": 1, "gpus_per_node": 8, "product": "NVIDIA GeForce RTX 3080"}
        },
        proxy=True,
    )
    observer = worker = None
    try:
        dev.start()
        # Before the observer starts: its first listing computes what fits of each package.
        PackageFactory(article=True)
        Cluster.objects.create(
            name=WEST,
            region="eu-west",
            kubeconfig=dev.write_kubeconfig(cluster_credentials / f"kubeconfig-{WEST}").name,
        )
        with kube.using(WEST):
            install_crd()
        worker = start_worker("west", queues=f"cluster.{WEST}")
        observer = start_observer("two-clusters")
        wait_until(lambda: (read_status(WEST) or {}).get("synced"), "the observer to list west-1")
        yield dev
    finally:
        if observer is not None:
            os.killpg(observer.pid, signal.SIGTERM)
            observer.wait(timeout=20)
        if worker is not None:
            stop_worker(worker)
        dev.stop()
        kube.reset()


@pytest.fixture
def deleted_at_end(west, auth_client, tenant):
    """Every unit the test leaves is deleted (and gone from both clusters) before west's
    worker and observer stop."""
    yield
    live = list(GPUUnit.objects.filter(tenant=tenant, phase__in=UnitPhase.LIVE))
    for unit in live:
        if unit.phase != UnitPhase.TERMINATING:
            auth_client.delete(f"/api/v1/gpu-units/{unit.name}")
    for unit in live:
        wait_until(lambda u=unit: _phase(u, UnitPhase.TERMINATED), f"{unit.name} to end")


def _objects_in(cluster: str, unit: GPUUnit) -> dict[str, bool]:
    """Which of the unit's objects `cluster` holds."""
    with kube.using(cluster):
        return {
            "gpuunit": kube.get(kube.GPUUNIT, unit.namespace, unit.name) is not None,
            "claim": kube.get(kube.RESOURCECLAIM, unit.namespace, unit.claim_name) is not None,
            "pod": kube.get(kube.POD, unit.namespace, manifests.pod_name_for(unit.name))
            is not None,
        }


def _phase(unit: GPUUnit, phase: str) -> bool:
    return GPUUnit.objects.filter(pk=unit.pk, phase=phase).exists()


def test_an_order_pinned_to_a_region_lands_in_its_cluster_and_nowhere_else(
    west, auth_client, deleted_at_end
):
    # The observer mirrors west's inventory into a mirror of its own.
    wait_until(
        lambda: PackageAvailability.objects.filter(
            cluster=WEST, package_id=ARTICLE_PACKAGE_ID, placeable__gt=0
        ).exists(),
        "west's mirror to show RTX 3080 x2 units placeable",
    )
    regions = {r["name"]: r for r in auth_client.get("/api/v1/regions").json()["data"]}
    assert [c["name"] for c in regions["eu-west"]["clusters"]] == [WEST]
    assert regions["eu-west"]["clusters"][0]["health"] == "reachable"

    there = order_unit(auth_client, "in-west", ARTICLE_PACKAGE_ID, region="eu-west")
    home = order_unit(auth_client, "at-home", ARTICLE_PACKAGE_ID, region="default")
    assert (there.cluster, there.region, home.cluster) == (WEST, "eu-west", "default")

    # West's worker provisions it there and west's observer sees it run.
    wait_until(lambda: _phase(there, UnitPhase.RUNNING), "in-west to run", timeout=60)
    wait_until(lambda: _phase(home, UnitPhase.RUNNING), "at-home to run", timeout=60)
    everything = {"gpuunit": True, "claim": True, "pod": True}
    nothing = {"gpuunit": False, "claim": False, "pod": False}
    assert _objects_in(WEST, there) == everything
    assert _objects_in("default", there) == nothing
    assert _objects_in("default", home) == everything
    assert _objects_in(WEST, home) == nothing
    shown = auth_client.get("/api/v1/gpu-units/in-west").json()["data"]
    assert (shown["cluster"], shown["region"], shown["phase"]) == (WEST, "eu-west", "Running")
    # Its log is read from west, where its pod runs.
    west.append_log(there.namespace, manifests.pod_name_for(there.name), ["hello from eu-west"])
    log = auth_client.get("/api/v1/gpu-units/in-west/logs")
    assert log.status_code == 200, log.content
    assert b"hello from eu-west" in log.content

    for unit in (there, home):
        assert auth_client.delete(f"/api/v1/gpu-units/{unit.name}").status_code == 202
    for unit in (there, home):
        wait_until(lambda u=unit: _phase(u, UnitPhase.TERMINATED), f"{unit.name} to end")
    assert _objects_in(WEST, there) == nothing
    assert _objects_in("default", home) == nothing


def test_a_cluster_outage_loses_nothing(west, auth_client, deleted_at_end, settings):
    """West stops answering with a unit running there: the unit keeps its phase with reason
    ClusterUnreachable, /regions says so, an order goes to the other region and one pinned to
    west is refused; west back, the unit is brought up to date from what west holds, with one
    pod, in west only."""
    wait_until(
        lambda: PackageAvailability.objects.filter(cluster=WEST, placeable__gt=0).exists(),
        "west's mirror",
    )
    unit = order_unit(auth_client, "in-west", ARTICLE_PACKAGE_ID, region="eu-west")
    wait_until(lambda: _phase(unit, UnitPhase.RUNNING), "in-west to run", timeout=60)
    pod_uid = GPUUnit.objects.get(pk=unit.pk).pod_k8s_uid

    settings.CLUSTER_LOST_AFTER_SECONDS = 1
    west.faults.unreachable = True
    west.faults.drop_watches()
    _wait_for_the_observer_to_lose(WEST)
    # Beat's sync of west fails, and once its mirror is older than the limit, west is lost.
    assert not sync.sync_inventory(WEST).ok
    wait_until(
        lambda: _health(WEST) == inventory_clusters.Health.UNREACHABLE, "west to be unreachable"
    )
    tasks.reconcile_units()  # beat's backstop tick marks the units of a lost cluster
    marked = GPUUnit.objects.get(pk=unit.pk)
    assert (marked.phase, marked.reason) == (UnitPhase.RUNNING, lifecycle.CLUSTER_UNREACHABLE)
    assert UnitEvent.objects.filter(unit=unit, reason=lifecycle.CLUSTER_UNREACHABLE).count() == 1
    tasks.reconcile_units()
    assert UnitEvent.objects.filter(unit=unit, reason=lifecycle.CLUSTER_UNREACHABLE).count() == 1

    regions = {r["name"]: r for r in auth_client.get("/api/v1/regions").json()["data"]}
    assert regions["eu-west"]["takesUnits"] is False
    assert regions["eu-west"]["clusters"][0]["health"] == "unreachable"
    refused = auth_client.post(
        "/api/v1/gpu-units",
        {
            "operationID": "pinned",
            "name": "pinned",
            "packageID": ARTICLE_PACKAGE_ID,
            "image": "busybox",
            "region": "eu-west",
        },
        format="json",
    )
    assert (refused.status_code, refused.json()["error"]["code"]) == (503, "region_unavailable")
    elsewhere = order_unit(auth_client, "elsewhere", ARTICLE_PACKAGE_ID)
    assert elsewhere.cluster == "default"

    west.faults.clear()
    wait_until(
        lambda: GPUUnit.objects.filter(
            pk=unit.pk, phase=UnitPhase.RUNNING, reason="Running"
        ).exists(),
        "in-west to be observed running again",
        timeout=90,
    )
    back = GPUUnit.objects.get(pk=unit.pk)
    assert back.pod_k8s_uid == pod_uid  # the same pod: nothing was made again
    with kube.using(WEST):
        pods = kube.list_objects(
            kube.POD,
            namespace=unit.namespace,
            label_selector=f"{manifests.LABEL_UNIT}={unit.name}",
        )
    assert [p["metadata"]["uid"] for p in pods] == [pod_uid]
    assert _objects_in("default", unit) == {"gpuunit": False, "claim": False, "pod": False}

    for name in ("in-west", "elsewhere"):
        assert auth_client.delete(f"/api/v1/gpu-units/{name}").status_code == 202
    for done in (unit, elsewhere):
        wait_until(lambda u=done: _phase(u, UnitPhase.TERMINATED), f"{done.name} to end")


def _wait_for_the_observer_to_lose(cluster: str) -> None:
    """Until the observer has seen its watches of `cluster` break, it may still mark the mirror
    current as of now (it does every OBSERVER_TOUCH_SECONDS while they hold): a mark made just
    after the failed sync below would make the cluster reachable again for a moment. Once its
    published status says it is not synced, it has stopped marking (it publishes after it
    marks, in the same step) and cannot start again while the cluster is away."""
    wait_until(
        lambda: (read_status(cluster) or {}).get("synced") is False,
        f"the observer to see {cluster}'s watches break",
    )


def _health(cluster: str) -> str:
    return next(s.health for s in inventory_selectors.cluster_states() if s.cluster.name == cluster)


def test_an_order_naming_no_region_fills_one_cluster_then_spills_into_the_other(
    west, auth_client, deleted_at_end
):
    """A unit of all eight RTX 3080s of a node: each cluster has room for one. They tie on
    room, so ops' order decides (west first); west full, the next goes to the other."""
    whole = PackageFactory(
        id="gpu-rtx3080-8x", spec_name="rtx3080.8x", gpu=8, count=8, cpu="16", memory="64Gi"
    )
    Cluster.objects.filter(name=WEST).update(position=50)
    for name in ("default", WEST):
        assert sync.sync_inventory(name).ok  # what fits of the new package, in each
    assert _placeable(whole.id) == {"default": 1, WEST: 1}

    first = order_unit(auth_client, "first", whole.id)
    assert first.cluster == WEST
    wait_until(lambda: _phase(first, UnitPhase.RUNNING), "first to run", timeout=60)
    # West's observer mirrors the allocation: nothing more fits there.
    wait_until(lambda: _placeable(whole.id)[WEST] == 0, "west to be full in its mirror")

    second = order_unit(auth_client, "second", whole.id)
    assert (second.cluster, second.region) == ("default", "default")
    wait_until(lambda: _phase(second, UnitPhase.RUNNING), "second to run", timeout=60)
    assert _objects_in(WEST, second) == {"gpuunit": False, "claim": False, "pod": False}


def _placeable(package_id: str) -> dict[str, int]:
    return dict(
        PackageAvailability.objects.filter(package_id=package_id).values_list(
            "cluster", "placeable"
        )
    )


def test_a_cluster_that_refuses_before_anything_is_made_lets_the_unit_be_placed_again(
    west, auth_client, tenant, tmp_path, cluster_credentials
):
    """Two clusters in eu-west; the first refuses to make GPUUnits (403, as RBAC would). The
    unit's create fails there before anything of it exists, so it is placed again in the other
    cluster of its region, and runs there; nothing of it is left in the first."""
    second = DevCluster(
        tmp_path / "west-2",
        name="west-2",
        topology={
            "generate": {"nodes": 1, "gpus_per_node": 2, "product": "NVIDIA GeForce RTX 3080"}
        },
    )
    worker = None
    try:
        second.start()
        Cluster.objects.create(
            name="west-2",
            region="eu-west",
            position=200,  # after west-1
            kubeconfig=second.write_kubeconfig(cluster_credentials / "kubeconfig-west-2").name,
        )
        with kube.using("west-2"):
            install_crd()
        worker = start_worker("west-2", queues="cluster.west-2")
        wait_until(lambda: (read_status("west-2") or {}).get("synced"), "west-2 to be watched")
        west.faults.set(verb="create", resource="gpuunits", error_rate=1.0, status=403)

        unit = order_unit(auth_client, "moved", ARTICLE_PACKAGE_ID, region="eu-west")
        assert unit.cluster == WEST
        wait_until(lambda: _phase(unit, UnitPhase.RUNNING), "moved to run", timeout=60)
        unit.refresh_from_db()
        assert (unit.cluster, unit.region, unit.clusters_refused) == (
            "west-2",
            "eu-west",
            [WEST],
        )
        refused = UnitEvent.objects.get(unit=unit, reason="ClusterRefused")
        assert "placed again in cluster west-2" in refused.message
        assert _objects_in("west-2", unit) == {"gpuunit": True, "claim": True, "pod": True}
        assert _objects_in(WEST, unit) == {"gpuunit": False, "claim": False, "pod": False}

        assert auth_client.delete("/api/v1/gpu-units/moved").status_code == 202
        wait_until(lambda: _phase(unit, UnitPhase.TERMINATED), "moved to end")
    finally:
        west.faults.clear()
        if worker is not None:
            stop_worker(worker)
        second.stop()


def test_a_cluster_stopped_mid_burst_loses_nothing(
    west, auth_client, tenant, deleted_at_end, settings
):
    """A burst to eu-west: two units run there, then west stops answering and two more are
    ordered before it counts as lost (placed there, their provisioning waiting on it). Lost:
    all four say ClusterUnreachable and keep their phase, /regions says so and new orders go
    to the other region. Back: every unit runs in west with one GPUUnit, claim and pod, none in
    the other cluster, the two that ran keep their pods, and the ledger bills each unit once
    for the time its pods held devices."""
    started = timezone.now()
    wait_until(
        lambda: PackageAvailability.objects.filter(cluster=WEST, placeable__gte=4).exists(),
        "west's mirror to show room for four",
    )
    ran = [
        order_unit(auth_client, f"ran-{n}", ARTICLE_PACKAGE_ID, region="eu-west") for n in (1, 2)
    ]
    for unit in ran:
        wait_until(lambda u=unit: _phase(u, UnitPhase.RUNNING), f"{unit.name} to run", timeout=60)
    pods = {u.pk: GPUUnit.objects.get(pk=u.pk).pod_k8s_uid for u in ran}

    west.faults.unreachable = True
    west.faults.drop_watches()
    late = [
        order_unit(auth_client, f"late-{n}", ARTICLE_PACKAGE_ID, region="eu-west") for n in (1, 2)
    ]
    assert {u.cluster for u in late} == {WEST}  # not lost yet: west still takes orders

    settings.CLUSTER_LOST_AFTER_SECONDS = 1
    _wait_for_the_observer_to_lose(WEST)
    assert not sync.sync_inventory(WEST).ok
    wait_until(
        lambda: _health(WEST) == inventory_clusters.Health.UNREACHABLE, "west to be unreachable"
    )
    burst = [*ran, *late]

    def marked_unreachable() -> dict[str, tuple[str, str]] | None:
        # A provisioning attempt still retrying against west writes its own reason between
        # reconciles: the next reconcile marks the unit again.
        tasks.reconcile_units()
        found = {
            u.name: (u.phase, u.reason)
            for u in GPUUnit.objects.filter(pk__in=[u.pk for u in burst])
        }
        reasons = {reason for _, reason in found.values()}
        return found if reasons == {lifecycle.CLUSTER_UNREACHABLE} else None

    marked = wait_until(marked_unreachable, "every unit of the burst to say west is unreachable")
    assert set(marked) == {u.name for u in burst}
    assert {marked[u.name][0] for u in ran} == {UnitPhase.RUNNING}
    assert all(marked[u.name][0] != UnitPhase.RUNNING for u in late)  # never made: not running

    regions = {r["name"]: r for r in auth_client.get("/api/v1/regions").json()["data"]}
    assert regions["eu-west"]["clusters"][0]["health"] == "unreachable"
    assert regions["eu-west"]["takesUnits"] is False
    elsewhere = order_unit(auth_client, "elsewhere", ARTICLE_PACKAGE_ID)
    assert elsewhere.cluster == "default"

    west.faults.clear()
    for unit in burst:
        wait_until(
            lambda u=unit: GPUUnit.objects.filter(
                pk=u.pk, phase=UnitPhase.RUNNING, reason="Running"
            ).exists(),
            f"{unit.name} to run in west",
            timeout=120,
        )
    everything = {"gpuunit": True, "claim": True, "pod": True}
    nothing = {"gpuunit": False, "claim": False, "pod": False}
    with kube.using(WEST):
        in_west = kube.list_objects(kube.POD, namespace=tenant.namespace)
    by_unit: dict[str, list[str]] = {}
    for pod in in_west:
        unit_name = pod["metadata"].get("labels", {}).get(manifests.LABEL_UNIT, "")
        by_unit.setdefault(unit_name, []).append(pod["metadata"]["uid"])
    for unit in burst:
        current = GPUUnit.objects.get(pk=unit.pk)
        assert current.cluster == WEST
        assert _objects_in(WEST, current) == everything
        assert _objects_in("default", current) == nothing
        assert by_unit[unit.name] == [current.pod_k8s_uid]  # one pod, the one it records
    for unit in ran:
        assert GPUUnit.objects.get(pk=unit.pk).pod_k8s_uid == pods[unit.pk]

    # Billing: every unit of the burst billed in its region, its records never overlapping,
    # and the ledger agreeing with the timeline of each (the usage audit finds no difference).
    uids = {str(GPUUnit.objects.get(pk=u.pk).uid) for u in burst}
    # A reconcile commits a unit's phase, then opens its meter (runtime/control/reconcile.py).
    wait_until(
        lambda: Meter.objects.filter(unit_uid__in=uids).count() == len(uids),
        "a meter open for each unit of the burst",
    )
    now = timezone.now()
    records = list(
        UsageRecord.objects.filter(unit_uid__in=uids, corrects__isnull=True).order_by("start")
    )
    assert {r.region for r in records} <= {"eu-west"}
    spans: dict[str, list[tuple]] = {}
    for record in records:
        spans.setdefault(str(record.unit_uid), []).append((record.start, record.end))
    for intervals in spans.values():
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(intervals))
    meters = {str(m.unit_uid): m for m in Meter.objects.filter(unit_uid__in=uids)}
    assert {uid: (m.region, m.pod_uid) for uid, m in meters.items()} == {
        str(current.uid): ("eu-west", current.pod_k8s_uid)
        for current in GPUUnit.objects.filter(pk__in=[u.pk for u in burst])
    }  # each billed now, once, for the pod that runs
    differences = [d for d in usage_audit.audit(started, now, now=now) if d.unit_uid in uids]
    assert differences == []


def test_a_storage_lives_in_one_cluster_and_its_units_run_there(
    west, auth_client, tenant, deleted_at_end
):
    """A storage made in eu-west has its claim in west only; a unit mounting it runs there
    though no region was named, one pinned elsewhere is refused naming the mount, and the
    storage's deletion removes the claim from west."""
    wait_until(
        lambda: PackageAvailability.objects.filter(cluster=WEST, placeable__gt=0).exists(),
        "west's mirror",
    )
    west.apply_manifests(DEV_GATEWAY)  # the default StorageClass `standard`
    made = auth_client.post(
        "/api/v1/gpu-storages", {"name": "data", "size": "1Gi", "region": "eu-west"}, format="json"
    )
    assert made.status_code == 201, made.json()
    assert (made.json()["data"]["region"], made.json()["data"]["cluster"]) == ("eu-west", WEST)
    storage = GPUStorage.objects.get(tenant=tenant, name="data")

    def claim_in(cluster: str) -> bool:
        with kube.using(cluster):
            return (
                kube.get(kube.PERSISTENTVOLUMECLAIM, tenant.namespace, "storage-data") is not None
            )

    # West's worker makes the claim there (bound once a pod uses it: WaitForFirstConsumer).
    wait_until(lambda: claim_in(WEST), "the storage's claim in west")
    assert not claim_in("default")

    mounts = [{"name": "data", "mountPath": "/data"}]
    refused = auth_client.post(
        "/api/v1/gpu-units",
        {
            "operationID": "pinned-home",
            "name": "pinned-home",
            "packageID": ARTICLE_PACKAGE_ID,
            "image": "busybox",
            "region": "default",
            "storageMounts": mounts,
        },
        format="json",
    )
    assert refused.status_code == 400, refused.json()
    error = refused.json()["error"]
    assert "data in cluster west-1" in error["details"]["fields"]["storageMounts"][0]
    assert not GPUUnit.objects.filter(tenant=tenant, name="pinned-home").exists()

    unit = order_unit(auth_client, "with-data", ARTICLE_PACKAGE_ID, storageMounts=mounts)
    assert (unit.cluster, unit.region) == (WEST, "eu-west")
    wait_until(lambda: _phase(unit, UnitPhase.RUNNING), "with-data to run in west", timeout=60)
    assert _objects_in(WEST, unit) == {"gpuunit": True, "claim": True, "pod": True}

    def bound() -> bool:
        volumes.sync_storages(WEST)  # beat's pass over west's storages
        return GPUStorage.objects.filter(pk=storage.pk, phase="Bound").exists()

    wait_until(bound, "the storage's claim to be bound in west")

    assert auth_client.delete("/api/v1/gpu-units/with-data").status_code == 202
    wait_until(lambda: _phase(unit, UnitPhase.TERMINATED), "with-data to end")
    assert auth_client.delete("/api/v1/gpu-storages/data").status_code == 202
    wait_until(
        lambda: not GPUStorage.objects.filter(pk=storage.pk).exists(), "the storage to be deleted"
    )
    assert (claim_in(WEST), claim_in("default")) == (False, False)


def test_a_unit_that_reads_secrets_runs_in_the_cluster_holding_them(
    west, auth_client, tenant, deleted_at_end
):
    """Secrets are written to the process's own cluster: an order reading one is placed
    there, one pinned to west is refused naming template.env, and a unit in west cannot be
    changed to read one."""
    wait_until(
        lambda: PackageAvailability.objects.filter(cluster=WEST, placeable__gt=0).exists(),
        "west's mirror",
    )
    provisioning.ensure_tenant_namespace(tenant)  # the secret's namespace, at home
    made = auth_client.post(
        "/api/v1/secrets", {"name": "hf", "data": {"token": "not-shown"}}, format="json"
    )
    assert made.status_code == 201, made.json()
    env = [{"name": "HF_TOKEN", "secretRef": {"name": "hf", "key": "token"}}]
    try:
        pinned = auth_client.post(
            "/api/v1/gpu-units",
            {
                "operationID": "reads-in-west",
                "name": "reads-in-west",
                "packageID": ARTICLE_PACKAGE_ID,
                "image": "busybox",
                "region": "eu-west",
                "template": {"env": env},
            },
            format="json",
        )
        assert pinned.status_code == 400, pinned.json()
        assert (
            "its secrets in cluster default"
            in (pinned.json()["error"]["details"]["fields"]["template.env"][0])
        )
        assert not GPUUnit.objects.filter(tenant=tenant, name="reads-in-west").exists()

        reader = order_unit(auth_client, "reader", ARTICLE_PACKAGE_ID, template={"env": env})
        assert reader.cluster == "default"

        there = order_unit(auth_client, "in-west", ARTICLE_PACKAGE_ID, region="eu-west")
        wait_until(lambda: _phase(there, UnitPhase.RUNNING), "in-west to run", timeout=60)
        etag = auth_client.get("/api/v1/gpu-units/in-west").json()["data"]["etag"]
        changed = auth_client.patch(
            "/api/v1/gpu-units/in-west",
            {"operationID": "read-a-secret", "template": {"env": env}},
            format="json",
            HTTP_IF_MATCH=etag,
        )
        assert changed.status_code == 400, changed.json()
        assert "template.env" in changed.json()["error"]["details"]["fields"]
        assert GPUUnit.objects.get(pk=there.pk).template.get("env") in (None, [])
    finally:
        for unit in GPUUnit.objects.filter(tenant=tenant, phase__in=UnitPhase.LIVE):
            auth_client.delete(f"/api/v1/gpu-units/{unit.name}")
        for unit in GPUUnit.objects.filter(tenant=tenant):
            wait_until(lambda u=unit: _phase(u, UnitPhase.TERMINATED), f"{unit.name} to end")
        assert auth_client.delete("/api/v1/secrets/hf").status_code in (202, 204)
