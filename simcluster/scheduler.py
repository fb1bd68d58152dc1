"""The simulated cluster's control loops for DRA pods: kube-scheduler (allocate claims, bind),
the kubelet's Running status, the device-taint-eviction controller, the resourceclaim
controller (claims from templates, release, deallocate, delete) and pod GC."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from simcluster import claimtemplates, taints
from simcluster.allocator import (
    Allocator,
    ClaimRequest,
    Inventory,
    NodeState,
    Placement,
    PodRequest,
    SelectorCache,
    Unschedulable,
    fit_error_message,
    preemption_message,
    usage_of,
)
from simcluster.errors import ApiError
from simcluster.kubelet import Kubelet
from simcluster.quota import Quantity, pod_is_terminal, pod_usage
from simcluster.store import clone
from simcluster.taints import TaintRules
from simcluster.volumes import check_pod_volumes, provision_for_node

if TYPE_CHECKING:
    from simcluster.store import Store

logger = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
# The event source of kube-controller-manager's resourceclaim controller.
CLAIM_CONTROLLER = "resource_claim"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
_WATCHED = (
    "nodes",
    "resourceslices",
    "devicetaintrules",
    "deviceclasses",
    "resourceclaims",
    "resourceclaimtemplates",
    # What a pod's volumes and environment need, for the scheduler and the kubelet.
    "persistentvolumeclaims",
    "persistentvolumes",
    "storageclasses",
    "secrets",
    "configmaps",
)


@dataclass
class PassReport:
    """What one pass did, for tests and the benchmark."""

    bound: int = 0
    unschedulable: int = 0
    errors: int = 0
    waiting_for_claims: int = 0
    released: int = 0
    deallocated: int = 0
    failed_pods: int = 0
    evicted: int = 0
    claims_created: int = 0
    claims_deleted: int = 0


class Scheduler:
    """Level-based: every pass recomputes from the store, so a restart loses nothing.

    A pod that failed to schedule is retried when something that could free room changed
    (a pod ended, a claim or node or slice or class changed) or after `retry_interval`, like
    the real scheduler's unschedulable queue, so failing pods do not spin writes and events.
    """

    def __init__(
        self,
        store: Store,
        *,
        tick: float = 1.0,
        retry_interval: float = 30.0,
        kubelet: Kubelet | None = None,
    ) -> None:
        self.store = store
        self.kubelet = kubelet if kubelet is not None else Kubelet(store)
        self.tick = tick
        self.retry_interval = retry_interval
        self._cache = SelectorCache()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pass_lock = threading.Lock()
        self._pass_thread: int | None = None
        # Bumped by changes that may make an unschedulable pod fit; guarded by store.lock.
        self._generation = 0
        self._attempts: dict[str, tuple[int, float]] = {}
        # What each pod version requests (cpu millicores, memory bytes), by (uid, version):
        # stored objects never change in place, so a version's requests never change either.
        self._requests: dict[tuple[str, str], tuple[int, int]] = {}
        self._events: dict[str, str] = {}
        # Pending pods changed by someone else since their last attempt (a new
        # resourceClaimStatuses entry, say): retried at once, as an update requeues a pod.
        self._touched: set[str] = set()
        # The last FailedResourceClaimCreation message per (pod uid, pod claim), so a failure
        # that repeats on every pass records one event.
        self._claim_failures: dict[tuple[str, str], str] = {}
        self._next_retry: float | None = None
        # Pods the eviction controller has a future deletion time for (uid -> when), and the
        # monotonic time of the earliest, so the loop wakes for it.
        self._evictions: dict[str, datetime] = {}
        self._next_eviction: float | None = None
        # The monotonic time the next container of a pod being deleted is due to end.
        self._next_termination: float | None = None
        store.add_listener(self._on_change)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="simcluster-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        last_pass = 0.0
        while not self._stopping.is_set():
            timeout = self.tick
            if self._next_termination is not None:
                timeout = min(timeout, max(0.0, self._next_termination - time.monotonic()))
            woken = self._wake.wait(timeout)
            self._wake.clear()
            if self._stopping.is_set():
                break
            now = time.monotonic()
            # Besides changes: a periodic resync (level-based safety net) and due retries.
            due = (
                now - last_pass >= self.retry_interval
                or (self._next_retry is not None and now >= self._next_retry)
                or (self._next_eviction is not None and now >= self._next_eviction)
                or (self._next_termination is not None and now >= self._next_termination)
            )
            if not (woken or due):
                continue
            try:
                self.run_once()
            except Exception:
                logger.exception("scheduler pass failed")
            last_pass = time.monotonic()

    def _on_change(self, event_type: str, resource: str, obj: dict[str, Any]) -> None:
        """Store listener (called under store.lock): decide whether a pass is due, nothing more."""
        if self._pass_thread == threading.get_ident():
            # A pass's own writes need no other pass, except a pod it deleted (an eviction):
            # its kubelet starts stopping it on the next one.
            if resource == "pods" and self.kubelet.should_stop(obj):
                self._wake.set()
            return
        if resource == "pods":
            metadata = obj.get("metadata") or {}
            if event_type == "DELETED" or pod_is_terminal(obj) or metadata.get("deletionTimestamp"):
                self._generation += 1
            elif (obj.get("spec") or {}).get("nodeName"):
                return
            else:
                self._touched.add(metadata.get("uid", ""))
            self._wake.set()
        elif resource in _WATCHED:
            self._generation += 1
            self._wake.set()

    # -- one pass ---------------------------------------------------------------------------

    def run_once(self) -> PassReport:
        """One synchronous pass: pod GC, taint eviction, claim release, then scheduling of
        pending pods."""
        with self._pass_lock, self.store.lock:
            self._pass_thread = threading.get_ident()
            try:
                return self._pass()
            finally:
                self._pass_thread = None

    def _pass(self) -> PassReport:
        report = PassReport()
        store = self.store
        nodes = {n["metadata"]["name"]: n for n in store.list_shared("nodes")[0]}
        pods = list(store.list_shared("pods")[0])
        # The kubelets first: pods whose containers ended go (and what they owned with them).
        terminating, due = self.kubelet.terminate(pods, datetime.now(UTC))
        self._next_termination = (
            None
            if due is None
            else time.monotonic() + max(0.0, (due - datetime.now(UTC)).total_seconds())
        )
        if terminating:
            pods = list(store.list_shared("pods")[0])
        claims = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): c
            for c in store.list_shared("resourceclaims")[0]
        }
        now = _timestamp()

        pods = [self._collect_orphan(pod, nodes, now, report) for pod in pods]
        pods = self._create_template_claims(pods, claims, now, report)
        if self.kubelet.retry(pods, nodes, now):
            pods = list(store.list_shared("pods")[0])
        classes = {c["metadata"]["name"]: c for c in store.list_shared("deviceclasses")[0]}
        inventory = Inventory(
            store.list_shared("resourceslices")[0],
            self._cache,
            TaintRules(_taint_rules(store), classes),
        )
        if self._evict(pods, claims, inventory, now, report):
            pods = list(store.list_shared("pods")[0])
        active = {pod["metadata"]["uid"] for pod in pods if not _pod_done(pod)}
        for key, claim in list(claims.items()):
            released = self._release(claim, active, report)
            if released is None:
                del claims[key]
            else:
                claims[key] = released
        self._delete_unused_generated(claims, pods, report)
        if report.released or report.deallocated or report.claims_deleted:
            self._generation += 1

        allocator = Allocator(
            inventory,
            classes,
            _node_states(nodes.values(), pods, self._requests),
            usage_of(claims.values(), inventory),
        )
        pending = sorted((pod for pod in pods if _is_pending(pod)), key=_queue_order)
        clock = time.monotonic()
        touched, self._touched = self._touched, set()
        for pod in pending:
            uid = pod["metadata"]["uid"]
            last = self._attempts.get(uid)
            if (
                last
                and uid not in touched
                and last[0] == self._generation
                and clock - last[1] < self.retry_interval
            ):
                report.unschedulable += 1
                continue
            self._schedule(pod, claims, nodes, allocator, now, report)
        if report.bound:
            self._note_bound(pending, claims, inventory)
        pending_uids = {pod["metadata"]["uid"] for pod in pending}
        self._attempts = {u: a for u, a in self._attempts.items() if u in pending_uids}
        self._events = {u: e for u, e in self._events.items() if u in pending_uids}
        self._next_retry = (
            min(at for _, at in self._attempts.values()) + self.retry_interval
            if self._attempts
            else None
        )
        return report

    def _schedule(
        self,
        pod: dict[str, Any],
        claims: dict[tuple[str, str], dict[str, Any]],
        nodes: Mapping[str, dict[str, Any]],
        allocator: Allocator,
        now: str,
        report: PassReport,
    ) -> None:
        metadata = pod["metadata"]
        namespace, uid = metadata["namespace"], metadata["uid"]
        volumes = check_pod_volumes(self.store, pod)
        if volumes.problem:
            # The VolumeBinding PreFilter: unresolvable on every node.
            total = len(nodes)
            message = fit_error_message(total, None, volumes.problem, preemption_message(total, 0))
            self._set_unscheduled(pod, "Unschedulable", message, now)
            self._record_event(pod, "Warning", "FailedScheduling", message, now)
            self._attempts[uid] = (self._generation, time.monotonic())
            report.unschedulable += 1
            return
        requests: list[ClaimRequest] = []
        for reference in (pod.get("spec") or {}).get("resourceClaims") or []:
            claim_name = _claim_name(pod, reference)
            claim = claims.get((namespace, claim_name or ""))
            if claim is None:
                # Held back before scheduling (PreEnqueue): a condition, but no event.
                if claim_name:
                    message = f'resourceclaim.resource.k8s.io "{claim_name}" not found'
                else:
                    message = f'pod "{namespace}/{metadata["name"]}": ResourceClaim not created yet'
                self._set_unscheduled(pod, "Unschedulable", message, now)
                self._attempts[uid] = (self._generation, time.monotonic())
                report.waiting_for_claims += 1
                return
            if (
                reference.get("resourceClaimTemplateName")
                and (claimtemplates.owning_pod(claim) or ("", ""))[1] != uid
            ):
                message = (
                    f"ResourceClaim {claim_name} was not created for pod "
                    f"{namespace}/{metadata['name']} (pod is not owner)"
                )
                self._set_unscheduled(pod, "Unschedulable", message, now)
                self._attempts[uid] = (self._generation, time.monotonic())
                report.waiting_for_claims += 1
                return
            if all(r.name != claim_name for r in requests):
                requests.append(ClaimRequest.from_claim(claim))
        request = PodRequest.from_pod(pod, requests)
        request.volume_affinities = volumes.node_affinities
        outcome = allocator.place(request)
        if isinstance(outcome, Placement):
            provision_for_node(self.store, volumes.delayed, outcome.node)
            self._bind(pod, request, outcome, claims, nodes[outcome.node], now)
            allocator.commit(outcome, request)
            self._attempts.pop(uid, None)
            report.bound += 1
            return
        if isinstance(outcome, Unschedulable):
            for claim_name in outcome.deallocate:
                key = (namespace, claim_name)
                claims[key] = self._write_claim(_deallocated(claims[key]))
                report.deallocated += 1
                self._generation += 1
            reason = "Unschedulable"
            report.unschedulable += 1
        else:
            reason = "SchedulerError"
            report.errors += 1
        self._set_unscheduled(pod, reason, outcome.message, now)
        self._record_event(pod, "Warning", "FailedScheduling", outcome.message, now)
        self._attempts[uid] = (self._generation, time.monotonic())

    # -- the resourceclaim controller: claims from templates ----------------------------------

    def _create_template_claims(
        self,
        pods: list[dict[str, Any]],
        claims: dict[tuple[str, str], dict[str, Any]],
        now: str,
        report: PassReport,
    ) -> list[dict[str, Any]]:
        """For each live pod entry naming a ResourceClaimTemplate and no existing claim: create
        the claim through the API (validation and quota apply, as for the real controller) and
        record it in pod.status.resourceClaimStatuses. A failure is a FailedResourceClaimCreation
        event on the pod, which stays Pending. Returns the pods as now stored."""
        templates: dict[tuple[str, str], dict[str, Any]] | None = None
        updated: list[dict[str, Any]] = []
        failing: set[tuple[str, str]] = set()
        for pod in pods:
            metadata = pod["metadata"]
            references = [
                r
                for r in (pod.get("spec") or {}).get("resourceClaims") or []
                if r.get("resourceClaimTemplateName")
            ]
            if not references or metadata.get("deletionTimestamp") or _pod_done(pod):
                updated.append(pod)
                continue
            namespace, uid = metadata["namespace"], metadata["uid"]
            recorded = {
                s.get("name"): s.get("resourceClaimName")
                for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
            }
            new_names: dict[str, str] = {}
            for reference in references:
                pod_claim = reference.get("name", "")
                name = recorded.get(pod_claim)
                existing = claims.get((namespace, name or "")) if name else None
                if (
                    existing is not None
                    and (claimtemplates.owning_pod(existing) or ("", ""))[1] == uid
                ):
                    continue
                found = claimtemplates.find_generated(
                    pod, pod_claim, (c for (ns, _), c in claims.items() if ns == namespace)
                )
                if found is None:
                    if templates is None:
                        templates = {
                            (t["metadata"]["namespace"], t["metadata"]["name"]): t
                            for t in self.store.list_shared("resourceclaimtemplates")[0]
                        }
                    template_name = reference["resourceClaimTemplateName"]
                    template = templates.get((namespace, template_name))
                    if template is None:
                        problem = (
                            f'resource claim template "{template_name}": '
                            f'resourceclaimtemplates.resource.k8s.io "{template_name}" not found'
                        )
                        self._claim_creation_failed(pod, pod_claim, problem, now, failing)
                        continue
                    body = claimtemplates.build_claim(pod, pod_claim, template)
                    try:
                        found = self.store.create("resourceclaims", body)
                    except ApiError as exc:
                        problem = f"create ResourceClaim : {exc.message}"
                        self._claim_creation_failed(pod, pod_claim, problem, now, failing)
                        continue
                    report.claims_created += 1
                    claims[(namespace, found["metadata"]["name"])] = found
                new_names[pod_claim] = found["metadata"]["name"]
            if not new_names:
                updated.append(pod)
                continue
            statuses = [
                s
                for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
                if s.get("name") not in new_names
            ]
            statuses += [{"name": n, "resourceClaimName": c} for n, c in new_names.items()]
            status = {**(pod.get("status") or {}), "resourceClaimStatuses": statuses}
            updated.append(self.store.update("pods", {**pod, "status": status}, internal=True))
        self._claim_failures = {k: v for k, v in self._claim_failures.items() if k in failing}
        return updated

    def _claim_creation_failed(
        self,
        pod: dict[str, Any],
        pod_claim: str,
        problem: str,
        now: str,
        failing: set[tuple[str, str]],
    ) -> None:
        key = (pod["metadata"]["uid"], pod_claim)
        failing.add(key)
        message = f"PodResourceClaim {pod_claim}: {problem}"
        if self._claim_failures.get(key) == message:
            return
        self._claim_failures[key] = message
        self._record_event(
            pod,
            "Warning",
            "FailedResourceClaimCreation",
            message,
            now,
            component=CLAIM_CONTROLLER,
        )

    def _delete_unused_generated(
        self,
        claims: dict[tuple[str, str], dict[str, Any]],
        pods: list[dict[str, Any]],
        report: PassReport,
    ) -> None:
        """A claim generated for a pod, reserved by nobody, whose pod is done or was replaced
        by a new one of the same name, is deleted; one whose pod is gone is left to the
        garbage collector (syncClaim)."""
        by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        for key, claim in list(claims.items()):
            owner = claimtemplates.owning_pod(claim)
            if owner is None or (claim.get("status") or {}).get("reservedFor"):
                continue
            if claim["metadata"].get("deletionTimestamp"):
                continue
            pod = by_name.get((key[0], owner[0]))
            if pod is None or (pod["metadata"]["uid"] == owner[1] and not _pod_done(pod)):
                continue
            try:
                _, removed = self.store.delete_object(
                    "resourceclaims", key[0], key[1], internal=True
                )
            except ApiError as exc:
                logger.debug("generated claim %s/%s not deleted: %s", key[0], key[1], exc)
                continue
            report.claims_deleted += 1
            if removed:
                del claims[key]

    # -- the device-taint-eviction controller ------------------------------------------------

    def _evict(
        self,
        pods: list[dict[str, Any]],
        claims: Mapping[tuple[str, str], dict[str, Any]],
        inventory: Inventory,
        now: str,
        report: PassReport,
    ) -> bool:
        """Delete, with a DisruptionTarget condition first, every scheduled pod that a claim
        reserved for it ties to a device with an untolerated NoExecute taint, once its
        tolerationSeconds (if any) are over; remember when the others are due. True when a
        pod was deleted."""
        device_taints = _device_taints(inventory)
        moment = datetime.now(UTC)
        due: dict[str, datetime] = {}
        spared: dict[str, dict[str, Any]] = {}
        deleted = False
        # Without a NoExecute taint anywhere only the pods with a pending deletion need a look
        # (to call it off): a pass stays as cheap as it was for clusters without taints.
        candidates = (
            pods
            if inventory.no_execute
            else [p for p in pods if p["metadata"]["uid"] in self._evictions]
        )
        for pod in candidates:
            metadata = pod["metadata"]
            if (
                not (pod.get("spec") or {}).get("nodeName")
                or metadata.get("deletionTimestamp")
                or pod_is_terminal(pod)
            ):
                continue
            when = self._pod_eviction_time(pod, claims, device_taints, moment)
            if when is None:
                spared[metadata["uid"]] = pod
                continue
            if when > moment:
                due[metadata["uid"]] = when
                continue
            self._delete_evicted(pod, now)
            report.evicted += 1
            deleted = True
        # A pending deletion whose taint went away (or is now tolerated) is called off.
        for uid in set(self._evictions) & set(spared):
            self._record_event(
                spared[uid],
                "Normal",
                taints.EVICTION_EVENT_REASON,
                taints.CANCEL_EVENT_MESSAGE,
                now,
                component=taints.EVICTION_CONTROLLER,
            )
        self._evictions = due
        self._time_next_eviction(moment)
        return deleted

    def _note_bound(
        self,
        pending: list[dict[str, Any]],
        claims: Mapping[tuple[str, str], dict[str, Any]],
        inventory: Inventory,
    ) -> None:
        """Pods bound in this pass to a device whose NoExecute taint they do not tolerate for
        good (a toleration with no effect lets the allocator place them): the controller deals
        with them in the next pass, as the real one reacts to the claim's reservation."""
        if not inventory.no_execute:
            return
        device_taints = _device_taints(inventory)
        moment = datetime.now(UTC)
        for pod in pending:
            metadata = pod["metadata"]
            bound = self.store.get_shared("pods", metadata["namespace"], metadata["name"])
            if bound is None or bound["metadata"]["uid"] != metadata["uid"]:
                continue
            if not (bound.get("spec") or {}).get("nodeName"):
                continue
            when = self._pod_eviction_time(bound, claims, device_taints, moment)
            if when is not None:
                self._evictions[metadata["uid"]] = when
        self._time_next_eviction(moment)

    def _time_next_eviction(self, moment: datetime) -> None:
        self._next_eviction = (
            time.monotonic() + max(0.0, (min(self._evictions.values()) - moment).total_seconds())
            if self._evictions
            else None
        )

    @staticmethod
    def _pod_eviction_time(
        pod: Mapping[str, Any],
        claims: Mapping[tuple[str, str], dict[str, Any]],
        device_taints: Callable[[taints.DeviceKey], Sequence[Mapping[str, Any]]],
        moment: datetime,
    ) -> datetime | None:
        """The earliest eviction time of the allocated claims reserved for this pod."""
        metadata = pod["metadata"]
        when: datetime | None = None
        for reference in (pod.get("spec") or {}).get("resourceClaims") or []:
            claim = claims.get((metadata["namespace"], _claim_name(pod, reference) or ""))
            if claim is None:
                continue
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if not any(r.get("uid") == metadata["uid"] for r in reserved):
                continue
            at = taints.claim_eviction_time(claim, device_taints, moment)
            if at is not None and (when is None or at < when):
                when = at
        return when

    def _delete_evicted(self, pod: dict[str, Any], now: str) -> None:
        """What the controller does to a pod it evicts: an event, the DisruptionTarget
        condition, then a delete with the pod's UID as precondition."""
        metadata = pod["metadata"]
        self._record_event(
            pod,
            "Normal",
            taints.EVICTION_EVENT_REASON,
            taints.EVICTION_EVENT_MESSAGE,
            now,
            component=taints.EVICTION_CONTROLLER,
        )
        status = dict(pod.get("status") or {})
        conditions = [
            c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"
        ]
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now,
                "reason": taints.EVICTION_REASON,
                "message": taints.EVICTION_MESSAGE,
            }
        )
        self.store.update(
            "pods", {**pod, "status": {**status, "conditions": conditions}}, internal=True
        )
        try:
            self.store.delete_object(
                "pods",
                metadata["namespace"],
                metadata["name"],
                preconditions={"uid": metadata["uid"]},
                internal=True,
            )
        except ApiError as exc:
            logger.debug(
                "evicted pod %s/%s not deleted: %s", metadata["namespace"], metadata["name"], exc
            )

    # -- writes -----------------------------------------------------------------------------

    def _bind(
        self,
        pod: dict[str, Any],
        request: PodRequest,
        placement: Placement,
        claims: dict[tuple[str, str], dict[str, Any]],
        node: Mapping[str, Any],
        now: str,
    ) -> None:
        """PreBind (claim allocation + reservation), Bind, then what the kubelet reports."""
        # Shallow copies suffice (the store copies what it stores) and keep a pass cheap.
        consumer = {"resource": "pods", "name": request.name, "uid": request.uid}
        for claim_request in request.claims:
            key = (request.namespace, claim_request.name)
            claim = claims[key]
            metadata = dict(claim["metadata"])
            status = dict(claim.get("status") or {})
            if claim_request.name in placement.allocations:
                status["allocation"] = placement.allocations[claim_request.name]
                finalizers = metadata.get("finalizers") or []
                if DELETE_PROTECTION not in finalizers:
                    metadata["finalizers"] = [*finalizers, DELETE_PROTECTION]
            reserved = status.get("reservedFor") or []
            if all(r.get("uid") != request.uid for r in reserved):
                status["reservedFor"] = [*reserved, consumer]
            claims[key] = self._write_claim({**claim, "metadata": metadata, "status": status})
        message = f"Successfully assigned {request.namespace}/{request.name} to {placement.node}"
        self._record_event(pod, "Normal", "Scheduled", message, now)
        bound = {**pod, "spec": {**pod["spec"], "nodeName": placement.node}}
        bound["status"] = self.kubelet.start(bound, node, now)
        self.store.update("pods", bound, internal=True)

    def _write_claim(self, claim: dict[str, Any]) -> dict[str, Any]:
        return self.store.update("resourceclaims", claim, internal=True)

    def _release(
        self, claim: dict[str, Any], active: set[str], report: PassReport
    ) -> dict[str, Any] | None:
        """The resourceclaim controller: drop reservations of pods that are gone or done, and
        deallocate a claim once its last consumer left. Returns the claim as now stored."""
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        kept = [
            r
            for r in reserved
            if r.get("resource") != "pods" or r.get("apiGroup") or r.get("uid") in active
        ]
        deleting_leftover = (
            claim["metadata"].get("deletionTimestamp")
            and not status.get("allocation")
            and DELETE_PROTECTION in (claim["metadata"].get("finalizers") or [])
        )
        if len(kept) == len(reserved) and not deleting_leftover:
            return claim
        updated = clone(claim)
        report.released += len(reserved) - len(kept)
        if kept:
            updated["status"]["reservedFor"] = kept
        else:
            if status.get("allocation"):
                report.deallocated += 1
            updated = _deallocated(updated)
        stored = self._write_claim(updated)
        # Dropping the last finalizer of a claim being deleted removes it from the store.
        if stored["metadata"].get("deletionTimestamp") and not stored["metadata"].get("finalizers"):
            return None
        return stored

    def _collect_orphan(
        self, pod: dict[str, Any], nodes: Mapping[str, Any], now: str, report: PassReport
    ) -> dict[str, Any]:
        """Pod GC for pods bound to a node that no longer exists: it marks them Failed with a
        DisruptionTarget condition. The real PodGC then force-deletes them; here they stay, so
        the owner of the pod can see what happened."""
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or node_name in nodes or pod_is_terminal(pod):
            return pod
        failed = clone(pod)
        status = failed.setdefault("status", {})
        status["phase"] = "Failed"
        conditions = [
            {**c, "status": "False", "lastTransitionTime": now}
            if c.get("type") in ("Ready", "ContainersReady")
            else c
            for c in status.get("conditions") or []
            if c.get("type") != "DisruptionTarget"
        ]
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByPodGC",
                "message": "PodGC: node no longer exists",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            }
        )
        status["conditions"] = conditions
        status["containerStatuses"] = [
            {
                **container,
                "ready": False,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was terminated",
                        "startedAt": (container.get("state") or {})
                        .get("running", {})
                        .get("startedAt"),
                        "finishedAt": now,
                    }
                },
            }
            for container in status.get("containerStatuses") or []
        ]
        report.failed_pods += 1
        return self.store.update("pods", failed, internal=True)

    def _set_unscheduled(self, pod: dict[str, Any], reason: str, message: str, now: str) -> None:
        status = pod.get("status") or {}
        conditions = status.get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if (
            current
            and current.get("status") == "False"
            and current.get("reason") == reason
            and current.get("message") == message
        ):
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": (
                current["lastTransitionTime"]
                if current
                and current.get("status") == "False"
                and current.get("lastTransitionTime")
                else now
            ),
            "reason": reason,
            "message": message,
        }
        conditions = [*(c for c in conditions if c.get("type") != "PodScheduled"), condition]
        updated = {**pod, "status": {**status, "conditions": conditions}}
        self.store.update("pods", updated, internal=True)

    def _record_event(
        self,
        pod: dict[str, Any],
        kind: str,
        reason: str,
        message: str,
        now: str,
        *,
        component: str = SCHEDULER_NAME,
    ) -> None:
        """One Event per pod and failure streak; a repeat bumps count instead of adding more.
        The scheduler's events name an action and the scheduler instance; a controller's (the
        taint eviction's) only its component, as client-go's legacy recorder writes them."""
        metadata = pod["metadata"]
        namespace, uid = metadata["namespace"], metadata["uid"]
        name = self._events.get(uid) if reason == "FailedScheduling" else None
        existing = self.store.get("events", namespace, name) if name else None
        if existing is not None:
            existing["count"] = int(existing.get("count") or 1) + 1
            existing["lastTimestamp"] = now
            existing["message"] = message
            self.store.update("events", existing, internal=True)
            return
        name = f"{metadata['name']}.{time.time_ns():x}"
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": metadata["name"],
                "uid": uid,
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": "",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        if component == SCHEDULER_NAME:
            event["action"] = "Scheduling" if kind == "Warning" else "Binding"
            event["reportingInstance"] = f"{SCHEDULER_NAME}-simcluster"
        try:
            self.store.create("events", event, internal=True)
        except ApiError as exc:
            # The namespace may be going away together with the pod.
            logger.debug("event for %s/%s not recorded: %s", namespace, metadata["name"], exc)
            return
        if reason == "FailedScheduling":
            self._events[uid] = name


def _taint_rules(store: Store) -> list[dict[str, Any]]:
    """The DeviceTaintRules, none where the kind is not served (its gate off)."""
    if store.registry.get("devicetaintrules") is None:
        return []
    return store.list_shared("devicetaintrules")[0]


def _device_taints(
    inventory: Inventory,
) -> Callable[[taints.DeviceKey], tuple[dict[str, Any], ...]]:
    def device_taints(key: taints.DeviceKey) -> tuple[dict[str, Any], ...]:
        device = inventory.by_key.get(key)
        return device.taints if device is not None else ()

    return device_taints


def _claim_name(pod: Mapping[str, Any], reference: Mapping[str, Any]) -> str | None:
    """The ResourceClaim a pod.spec.resourceClaims entry stands for; a template-based entry has
    one only once the resourceclaim controller recorded it in the pod status."""
    if reference.get("resourceClaimName"):
        return str(reference["resourceClaimName"])
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == reference.get("name"):
            return status.get("resourceClaimName")
    return None


def _deallocated(claim: dict[str, Any]) -> dict[str, Any]:
    """No allocation, no reservations, and no delete protection left to hold it."""
    updated = clone(claim)
    status = updated.get("status") or {}
    status.pop("allocation", None)
    status.pop("reservedFor", None)
    updated["status"] = status
    finalizers = [f for f in updated["metadata"].get("finalizers") or [] if f != DELETE_PROTECTION]
    if finalizers:
        updated["metadata"]["finalizers"] = finalizers
    else:
        updated["metadata"].pop("finalizers", None)
    return updated


def _pod_done(pod: Mapping[str, Any]) -> bool:
    """A pod that no longer needs its claims: terminal, or deleted before it was scheduled."""
    return pod_is_terminal(pod) or bool(
        (pod.get("metadata") or {}).get("deletionTimestamp")
        and not (pod.get("spec") or {}).get("nodeName")
    )


def _is_pending(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase", "Pending") in ("Pending", "")
        and spec.get("schedulerName", SCHEDULER_NAME) == SCHEDULER_NAME
    )


def _queue_order(pod: Mapping[str, Any]) -> tuple[int, str, str, str]:
    metadata = pod["metadata"]
    return (
        -int((pod.get("spec") or {}).get("priority") or 0),
        metadata.get("creationTimestamp") or "",
        metadata.get("namespace") or "",
        metadata["name"],
    )


def _node_states(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    requests: dict[tuple[str, str], tuple[int, int]] | None = None,
) -> list[NodeState]:
    """Free CPU, memory and pod slots: allocatable minus what the node's live pods request
    (`requests` remembers each pod version's, so a pass does not parse every pod again)."""
    requests = {} if requests is None else requests
    states: dict[str, NodeState] = {}
    for node in nodes:
        status = node.get("status") or {}
        allocatable = status.get("allocatable") or status.get("capacity") or {}
        conditions = status.get("conditions") or []
        ready = next(
            (c.get("status") == "True" for c in conditions if c.get("type") == "Ready"), True
        )
        states[node["metadata"]["name"]] = NodeState(
            name=node["metadata"]["name"],
            labels=dict(node["metadata"].get("labels") or {}),
            cpu_free=_milli(allocatable.get("cpu", "0")),
            memory_free=_whole(allocatable.get("memory", "0")),
            pods_free=_whole(allocatable.get("pods", "110")),
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            ready=ready,
        )
    seen: set[tuple[str, str]] = set()
    for pod in pods:
        state = states.get((pod.get("spec") or {}).get("nodeName") or "")
        if state is None or pod_is_terminal(pod):
            continue
        metadata = pod["metadata"]
        key = (metadata.get("uid", ""), metadata.get("resourceVersion", ""))
        seen.add(key)
        if key not in requests:
            usage = pod_usage(pod)
            requests[key] = (
                _milli(usage["requests.cpu"]) if "requests.cpu" in usage else 0,
                _whole(usage["requests.memory"]) if "requests.memory" in usage else 0,
            )
        cpu, memory = requests[key]
        state.pods_free -= 1
        state.cpu_free -= cpu
        state.memory_free -= memory
    for gone in set(requests) - seen:  # versions no longer bound to a node
        del requests[gone]
    return list(states.values())


def _milli(value: Any) -> int:
    amount = value.amount if isinstance(value, Quantity) else Quantity.parse(value).amount
    return int((amount * 1000).to_integral_value(rounding="ROUND_CEILING"))


def _whole(value: Any) -> int:
    amount = value.amount if isinstance(value, Quantity) else Quantity.parse(value).amount
    return int(amount.to_integral_value(rounding="ROUND_CEILING"))


def _timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
