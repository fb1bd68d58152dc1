"""The Kubernetes version the simulated cluster emulates and the DRA feature gates it has on:
the one table of which gate is at which stage in which version, and the dropping of a disabled
gate's fields on write, as the API server's strategies drop them (silently, not as an error)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

SUPPORTED_VERSIONS = ("1.34", "1.35", "1.36")
DEFAULT_VERSION = "1.36"


class Stage(StrEnum):
    ALPHA = "alpha"
    BETA = "beta"
    GA = "GA"


@dataclass(frozen=True)
class Gate:
    """A feature gate: per emulated version its stage and whether it is on by default (a
    version it is missing from does not have the gate), where that comes from, and the fields
    it guards per store key, as dotted paths in which `*` is every item of a list or every
    value of a map."""

    name: str
    stages: Mapping[str, tuple[Stage, bool]]
    source: str
    fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


_ON, _OFF = True, False


def _claim_fields(
    spec: tuple[str, ...] = (), status: tuple[str, ...] = ()
) -> dict[str, tuple[str, ...]]:
    """Fields of a claim spec, which a ResourceClaim holds at `spec` and a
    ResourceClaimTemplate at `spec.spec`, plus fields of a claim's status."""
    return {
        "resourceclaims": tuple(f"spec.{path}" for path in spec) + status,
        "resourceclaimtemplates": tuple(f"spec.spec.{path}" for path in spec),
    }


# Stages from the references in docs/reference/: dra-facts.md §0 (the 1.34 baseline, checked
# against the 1.34 schema) and dra-next.md §1 (the stages after 1.34, from the 1.37
# kube_features.go and the KEPs). Where dra-next.md gives a 1.36 beta without saying whether it
# is on by default, the gate is on at 1.36, as the simulated cluster was before it had versions;
# those entries say "default not given".
GATES: tuple[Gate, ...] = (
    Gate(
        "DRAPrioritizedList",
        {"1.34": (Stage.BETA, _ON), "1.35": (Stage.BETA, _ON), "1.36": (Stage.GA, _ON)},
        "dra-facts.md §0: beta and on by default in 1.34; dra-next.md §1 (KEP-4816): "
        "alpha 1.33, beta 1.34, GA 1.36",
        _claim_fields(spec=("devices.requests.*.firstAvailable",)),
    ),
    Gate(
        "DRAAdminAccess",
        {"1.34": (Stage.BETA, _ON), "1.35": (Stage.BETA, _ON), "1.36": (Stage.GA, _ON)},
        "dra-facts.md §0: beta and on in 1.34; dra-next.md §1 (KEP-5018): alpha 1.32, "
        "beta 1.34, GA 1.36",
        _claim_fields(
            spec=("devices.requests.*.exactly.adminAccess",),
            status=("status.allocation.devices.results.*.adminAccess",),
        ),
    ),
    Gate(
        "DRAResourceClaimDeviceStatus",
        {"1.34": (Stage.BETA, _ON), "1.35": (Stage.BETA, _ON), "1.36": (Stage.BETA, _ON)},
        "dra-facts.md §0: beta and on since 1.33, GA in 1.36; dra-next.md §1 (KEP-4817): GA "
        "1.37 (the two disagree on 1.36; on in every emulated version either way)",
        _claim_fields(status=("status.devices",)),
    ),
    Gate(
        "DRADeviceTaints",
        # 1.36: default not given; on, which the device-health tests need.
        {"1.34": (Stage.ALPHA, _OFF), "1.35": (Stage.ALPHA, _OFF), "1.36": (Stage.BETA, _ON)},
        "dra-facts.md §0: alpha and off in 1.34; dra-next.md §1 (KEP-5055): alpha 1.33, "
        "beta 1.36, GA 1.37",
        {
            "resourceslices": ("spec.devices.*.taints",),
            **_claim_fields(
                spec=(
                    "devices.requests.*.exactly.tolerations",
                    "devices.requests.*.firstAvailable.*.tolerations",
                ),
                status=("status.allocation.devices.results.*.tolerations",),
            ),
        },
    ),
    Gate(
        # The DeviceTaintRule kind, no fields: a gate of its own from 1.35; in 1.34 the kind
        # comes with DRADeviceTaints (FeatureGates.serves_device_taint_rules).
        "DRADeviceTaintRules",
        # Off by default in 1.36 too, with its API versions (k8s PR #137170, issue #140179): a
        # cluster that taints devices by rule turns it on, as the tests' cluster and `make
        # run`'s do (--feature-gates DRADeviceTaintRules=true).
        {"1.35": (Stage.ALPHA, _OFF), "1.36": (Stage.BETA, _OFF)},
        "dra-next.md §1 (KEP-5055): alpha 1.35, beta 1.36, GA 1.37; off by default in 1.36 "
        "(k8s PR #137170, issue #140179)",
    ),
    Gate(
        "DRAPartitionableDevices",
        {"1.34": (Stage.ALPHA, _OFF), "1.35": (Stage.ALPHA, _OFF), "1.36": (Stage.BETA, _ON)},
        "dra-facts.md §0: alpha and off in 1.34; dra-next.md §1 (KEP-4815): alpha 1.33, "
        "beta 1.36 (on), and §2: to be enabled by hand on 1.34-1.35, on by default from 1.36",
        {
            "resourceslices": (
                "spec.sharedCounters",
                "spec.perDeviceNodeSelection",
                "spec.devices.*.consumesCounters",
                "spec.devices.*.nodeName",
                "spec.devices.*.nodeSelector",
                "spec.devices.*.allNodes",
            )
        },
    ),
    Gate(
        "DRAConsumableCapacity",
        {"1.34": (Stage.ALPHA, _OFF), "1.35": (Stage.ALPHA, _OFF), "1.36": (Stage.BETA, _ON)},
        "dra-facts.md §0: alpha and off in 1.34; dra-next.md §1 (KEP-5075): alpha 1.34, "
        "beta 1.36 (on)",
        {
            "resourceslices": (
                "spec.devices.*.allowMultipleAllocations",
                "spec.devices.*.capacity.*.requestPolicy",
            ),
            **_claim_fields(
                spec=(
                    "devices.requests.*.exactly.capacity",
                    "devices.requests.*.firstAvailable.*.capacity",
                    "devices.constraints.*.distinctAttribute",
                ),
                status=(
                    "status.allocation.devices.results.*.shareID",
                    "status.allocation.devices.results.*.consumedCapacity",
                    "status.devices.*.shareID",
                ),
            ),
        },
    ),
    Gate(
        "DRADeviceBindingConditions",
        # 1.36: default not given; on, as the simulated cluster kept these fields before.
        {"1.34": (Stage.ALPHA, _OFF), "1.35": (Stage.ALPHA, _OFF), "1.36": (Stage.BETA, _ON)},
        "dra-facts.md §0: alpha and off in 1.34; dra-next.md §1 (KEP-5007): alpha 1.34, beta 1.36",
        {
            "resourceslices": (
                "spec.devices.*.bindsToNode",
                "spec.devices.*.bindingConditions",
                "spec.devices.*.bindingFailureConditions",
            ),
            **_claim_fields(
                status=(
                    "status.allocation.devices.results.*.bindingConditions",
                    "status.allocation.devices.results.*.bindingFailureConditions",
                    "status.allocation.allocationTimestamp",
                )
            ),
        },
    ),
    Gate(
        "DRAExtendedResource",
        # 1.36: default not given; on, as the simulated cluster kept the field before.
        {"1.34": (Stage.ALPHA, _OFF), "1.35": (Stage.ALPHA, _OFF), "1.36": (Stage.BETA, _ON)},
        "dra-facts.md §0 and §2: alpha and off in 1.34; dra-next.md §1 (KEP-5004): alpha 1.34, "
        "beta 1.36, GA 1.37",
        {"deviceclasses": ("spec.extendedResourceName",)},
    ),
)


def at_least(version: str, minimum: str) -> bool:
    """Whether the emulated `version` is `minimum` or newer: `at_least("1.36", "1.35")`."""
    return _minor(version) >= _minor(minimum)


def _minor(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def release(version: str) -> str:
    """The release a minor version is emulated as, as kubelets report it: `v1.36.0`."""
    return f"v{version}.0"


class FeatureGates:
    """The gates of one emulated version, their defaults changed by `overrides` as
    `--feature-gates` changes them; a gate the version does not have cannot be set."""

    def __init__(
        self, version: str = DEFAULT_VERSION, overrides: Mapping[str, bool] | None = None
    ) -> None:
        if version not in SUPPORTED_VERSIONS:
            raise ValueError(
                f"unsupported Kubernetes version {version!r}: one of "
                f"{', '.join(SUPPORTED_VERSIONS)}"
            )
        self.version = version
        self._enabled = {
            gate.name: gate.stages[self.version][1] for gate in GATES if self.version in gate.stages
        }
        for name, value in (overrides or {}).items():
            if name not in self._enabled:
                raise ValueError(f"unrecognized feature gate: {name}")
            self._enabled[name] = bool(value)

    def enabled(self, name: str) -> bool:
        return self._enabled.get(name, False)

    @property
    def serves_device_taint_rules(self) -> bool:
        """DeviceTaintRule is served with DRADeviceTaints on and, where it has a gate of its
        own (1.35 on), that gate on too."""
        if not self.enabled("DRADeviceTaints"):
            return False
        return self._enabled.get("DRADeviceTaintRules", True)

    @property
    def device_taint_rule_versions(self) -> tuple[str, ...]:
        """The resource.k8s.io versions DeviceTaintRule is served at, the one it is stored in
        first; none where the gates leave it off. v1alpha3 in 1.34 and 1.35; 1.36 adds v1beta2
        (k8s PR #137170; the 1.36 schemas have both, the 1.35 ones v1alpha3 only), whose fields
        are those of 1.36's v1alpha3, so converting between the two is renaming apiVersion.
        Both API versions are off by default in a real cluster (--runtime-config enables
        them); this one serves them wherever the gates are on."""
        if not self.serves_device_taint_rules:
            return ()
        return ("v1beta2", "v1alpha3") if at_least(self.version, "1.36") else ("v1alpha3",)

    @property
    def device_taint_rule_status(self) -> bool:
        """DeviceTaintRule has a status (and its subresource) from 1.35 (k8s PR #134152)."""
        return at_least(self.version, "1.35")

    def drop_disabled_fields(self, resource: str, obj: dict[str, Any]) -> None:
        """Remove from `obj` (in place) the fields of every disabled gate. The real strategies
        keep them on an update of an object that already has them, stored while the gate was
        on; here the gates never change while objects are stored (a restore drops them too),
        so no stored object has them."""
        for gate in GATES:
            if self.enabled(gate.name):
                continue
            for path in gate.fields.get(resource, ()):
                _remove(obj, tuple(path.split(".")))


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    return value if isinstance(value, list) else []


def _remove(value: Any, path: tuple[str, ...]) -> None:
    head, rest = path[0], path[1:]
    if head == "*":
        for item in _children(value):
            _remove(item, rest)
    elif isinstance(value, dict) and head in value:
        if rest:
            _remove(value[head], rest)
        else:
            del value[head]
