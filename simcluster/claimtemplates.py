"""The resourceclaim controller's half that turns a pod's `resourceClaimTemplateName` entries
into ResourceClaims: what it names them, what it copies from the template and how it finds one
it created before. Pure functions; the scheduler's pass does the writes."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
# generateName is cut so that base, hyphen and the 5 random characters fit in 63.
MAX_BASE_LENGTH = 57


def generate_name(pod_name: str, pod_claim_name: str) -> str:
    """`<pod>-<podClaimName>-`; when too long, both parts are cut in proportion to their
    length rather than the claim name being lost at the end (handleClaim in the controller)."""
    name = f"{pod_name}-{pod_claim_name}-"
    if len(name) > MAX_BASE_LENGTH:
        total = len(name)
        name = (
            pod_name[: len(pod_name) * MAX_BASE_LENGTH // total]
            + "-"
            + pod_claim_name[: len(pod_claim_name) * MAX_BASE_LENGTH // total]
        )
    return name


def is_pod_done(pod: Mapping[str, Any]) -> bool:
    """Certain never to run (again): terminal, or deleted before it was scheduled."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed") or bool(
        (pod.get("metadata") or {}).get("deletionTimestamp")
        and not (pod.get("spec") or {}).get("nodeName")
    )


def owning_pod(claim: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the pod that controls a claim, if a pod does."""
    for owner in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if (
            owner.get("controller")
            and owner.get("apiVersion") == "v1"
            and owner.get("kind") == "Pod"
        ):
            return str(owner.get("name", "")), str(owner.get("uid", ""))
    return None


def find_generated(
    pod: Mapping[str, Any], pod_claim_name: str, claims: Iterable[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """A claim created for this pod claim before the pod status recorded it (the controller
    created it, then failed before the status update)."""
    uid = pod["metadata"].get("uid")
    for claim in claims:
        owner = owning_pod(claim)
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        if owner and owner[1] == uid and annotations.get(POD_CLAIM_NAME) == pod_claim_name:
            return claim
    return None


def build_claim(
    pod: Mapping[str, Any], pod_claim_name: str, template: Mapping[str, Any]
) -> dict[str, Any]:
    """The claim for one pod claim: the template's claim spec, labels and annotations, the
    pod-claim-name annotation and the pod as controlling owner that blocks its deletion."""
    metadata = pod["metadata"]
    template_spec = template.get("spec") or {}
    template_meta = template_spec.get("metadata") or {}
    annotations = {**(template_meta.get("annotations") or {}), POD_CLAIM_NAME: pod_claim_name}
    claim_metadata: dict[str, Any] = {
        "generateName": generate_name(metadata["name"], pod_claim_name),
        "namespace": metadata["namespace"],
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": metadata["name"],
                "uid": metadata["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if template_meta.get("labels"):
        claim_metadata["labels"] = dict(template_meta["labels"])
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": claim_metadata,
        "spec": copy.deepcopy(template_spec.get("spec") or {}),
    }
