"""DRA device taints (KEP-5055) as a 1.34 cluster with DRADeviceTaints and DRADeviceTaintRules
applies them: the taints a device carries (its slice's, then those of matching DeviceTaintRules),
toleration matching, and when an untolerated NoExecute taint evicts the pods of a claim."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dracel import CelCompileError, CompiledSelector, compile_selector
from simcluster.features import at_least

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
NONE = "None"
# The effects 1.34 accepts, sorted as its validation messages list them (and the effects a
# toleration may name); a device taint may have None too from 1.35 (k8s PR #134152, the 1.35
# schemas' DeviceTaint.effect), which marks a device without keeping claims off it.
EFFECTS = (NO_EXECUTE, NO_SCHEDULE)
EFFECTS_SINCE_1_35 = (NO_EXECUTE, NO_SCHEDULE, NONE)
# The effects that keep an untolerated claim off a device; any other counts as None.
_BLOCKING = frozenset(EFFECTS)
OPERATORS = ("Equal", "Exists")


def effects_of(version: str) -> tuple[str, ...]:
    """The effects a device taint may have in an emulated version."""
    return EFFECTS_SINCE_1_35 if at_least(version, "1.35") else EFFECTS


# What kube-controller-manager's device-taint-eviction-controller writes and reports.
EVICTION_CONTROLLER = "device-taint-eviction-controller"
EVICTION_REASON = "DeletionByDeviceTaintManager"
EVICTION_MESSAGE = "Device Taint manager: deleting due to NoExecute taint"
EVICTION_EVENT_REASON = "DeviceTaintManagerEviction"
EVICTION_EVENT_MESSAGE = "Marking for deletion"
CANCEL_EVENT_MESSAGE = "Cancelling deletion"

DeviceKey = tuple[str, str, str]
# Runs a device class's or a rule's CEL selectors against one device: (cache key, selectors).
Matcher = Callable[[tuple[str, ...], list[CompiledSelector]], bool]


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """resourceclaim.ToleratesTaint: an empty effect or key matches any; Exists matches every
    value, Equal (the default) only the same value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def all_tolerated(taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping]) -> bool:
    """The allocator's rule: a device may be allocated only when every one of its NoSchedule
    and NoExecute taints is tolerated by some toleration of the request (admin access is no
    exception); a None taint, or one of an effect it does not know, does not count."""
    return all(
        any(tolerates(t, taint) for t in tolerations)
        for taint in taints
        if taint.get("effect") in _BLOCKING
    )


@dataclass(frozen=True)
class _Rule:
    name: str
    taint: dict[str, Any]
    selector: Mapping[str, Any] | None
    # CEL of the selector's device class, or None when that class does not exist.
    class_key: tuple[str, ...]
    class_selectors: list[CompiledSelector] | None
    key: tuple[str, ...]
    selectors: list[CompiledSelector] | None


class TaintRules:
    """The DeviceTaintRules of a pass, matched as the 1.34 ResourceSlice tracker does: driver,
    pool and device by name, the named DeviceClass's selectors and the rule's own selectors
    (a CEL error, or a class that does not exist, matches nothing). A rule without any
    deviceSelector taints every device, whatever the field's description says: what the 1.34
    tracker does, for scheduling and (through it) eviction alike (k8s #141620, fixed in 1.38)."""

    def __init__(
        self,
        rules: Iterable[Mapping[str, Any]] = (),
        classes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        classes = classes or {}
        self.rules: list[_Rule] = []
        for rule in sorted(rules, key=lambda r: (r.get("metadata") or {}).get("name", "")):
            spec = rule.get("spec") or {}
            selector = spec.get("deviceSelector")
            class_key: tuple[str, ...] = ()
            class_selectors: list[CompiledSelector] | None = []
            class_name = (selector or {}).get("deviceClassName")
            if class_name:
                device_class = classes.get(class_name)
                expressions = _expressions(
                    ((device_class or {}).get("spec") or {}).get("selectors")
                )
                class_key = ("\x01class", *expressions)
                class_selectors = _compiled(expressions) if device_class is not None else None
            expressions = _expressions((selector or {}).get("selectors"))
            self.rules.append(
                _Rule(
                    name=(rule.get("metadata") or {}).get("name", ""),
                    taint=dict(spec.get("taint") or {}),
                    selector=selector,
                    class_key=class_key,
                    class_selectors=class_selectors,
                    key=("\x01rule", *expressions),
                    selectors=_compiled(expressions),
                )
            )

    def __bool__(self) -> bool:
        return bool(self.rules)

    def matching(
        self, driver: str, pool: str, device: str, matches: Matcher
    ) -> list[tuple[str, dict[str, Any]]]:
        """(rule name, taint) of every rule that taints this device, in rule-name order."""
        found = []
        for rule in self.rules:
            selector = rule.selector
            if selector is not None:
                if selector.get("driver") is not None and selector["driver"] != driver:
                    continue
                if selector.get("pool") is not None and selector["pool"] != pool:
                    continue
                if selector.get("device") is not None and selector["device"] != device:
                    continue
                if rule.class_selectors is None or rule.selectors is None:
                    continue
                if rule.class_selectors and not matches(rule.class_key, rule.class_selectors):
                    continue
                if rule.selectors and not matches(rule.key, rule.selectors):
                    continue
            found.append((rule.name, rule.taint))
        return found


def _expressions(selectors: Any) -> list[str]:
    return [
        str((s.get("cel") or {}).get("expression", ""))
        for s in selectors or []
        if isinstance(s, dict) and s.get("cel")
    ]


def _compiled(expressions: list[str]) -> list[CompiledSelector] | None:
    try:
        return [compile_selector(e) for e in expressions]
    except CelCompileError:
        return None


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def eviction_time(
    taints: Iterable[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]], now: datetime
) -> datetime | None:
    """When an allocated device's NoExecute taints evict the claim's pods, given the
    tolerations the allocation recorded: a taint's timeAdded plus the shortest tolerationSeconds
    among the NoExecute tolerations matching it (negative counts as 0); a matching NoExecute
    toleration without tolerationSeconds ignores the taint. Only tolerations whose effect is
    NoExecute count here, as in the 1.34 controller: one with no effect lets the allocator place
    the device but does not keep the pod once a NoExecute taint is on it."""
    when: datetime | None = None
    for taint in taints:
        if taint.get("effect") != NO_EXECUTE:
            continue
        added = parse_time(taint.get("timeAdded")) or now
        forever = False
        seconds: int | None = None
        for toleration in tolerations:
            if toleration.get("effect") != NO_EXECUTE or not tolerates(toleration, taint):
                continue
            if toleration.get("tolerationSeconds") is None:
                forever = True
                break
            value = max(0, int(toleration["tolerationSeconds"]))
            seconds = value if seconds is None else min(seconds, value)
        if forever:
            continue
        at = added + timedelta(seconds=seconds or 0)
        when = at if when is None or at < when else when
    return when


def claim_eviction_time(
    claim: Mapping[str, Any],
    device_taints: Callable[[DeviceKey], Sequence[Mapping[str, Any]]],
    now: datetime,
) -> datetime | None:
    """The earliest eviction time over the devices of an allocated claim."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    when: datetime | None = None
    for result in (allocation.get("devices") or {}).get("results") or []:
        key = (result.get("driver", ""), result.get("pool", ""), result.get("device", ""))
        at = eviction_time(device_taints(key), result.get("tolerations") or [], now)
        if at is not None and (when is None or at < when):
            when = at
    return when
