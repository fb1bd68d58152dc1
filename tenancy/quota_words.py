"""How a person is told of a refusal by the tenant's quota (a QuotaExceeded, whose details name
the limit, what was asked, what is in use and the quota), for an order, a start and a storage."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What a limit counts, as the sentences name it; a limit not listed (a device class's quota) is
# named as the quota names it.
LIMIT_NAMES = {
    "requests.cpu": "CPU",
    "requests.memory": "memory",
    "count/resourceclaims.resource.k8s.io": "units",
    "limits.ephemeral-storage": "ephemeral disk",
}

# Per thing asked for: the refusal when it alone is larger than the whole quota (freeing
# anything never makes room, only a smaller one fits), when too little of the quota is left,
# and when a count is full (the details name no amount asked). A case a thing does not word
# is said as "left".
REFUSALS: dict[str, dict[str, str]] = {
    "package": {
        "larger": (
            "This package is larger than your whole quota: it needs {requested} {what} of the "
            "{hard} you have. Pick a smaller package, or ask us to raise your quota."
        ),
        "left": (
            "Not enough quota left for this package: it needs {requested} {what}, and {used} of "
            "{hard} are in use. Delete a unit or pick a smaller package."
        ),
    },
    "start": {
        "left": (
            "{unit} was not started: it needs {requested} {what}, and {used} of the {hard} of "
            "your quota are in use. Stop or delete another unit, or ask us to raise your quota."
        ),
    },
    "storage": {
        "larger": (
            "This is larger than your whole storage quota: it needs {requested} of the {hard} "
            "you have. Pick a smaller size, or ask us to raise your quota."
        ),
        "left": (
            "Not enough storage quota left: this needs {requested}, and {used} of {hard} are in "
            "use. Pick a smaller size, delete a storage you no longer need, or ask us to raise "
            "your quota."
        ),
        "full": (
            "The tenant has {used} of the {hard} storages its quota allows. Delete one you no "
            "longer need, or ask us to raise the quota."
        ),
    },
}


def quota_refusal(details: Mapping[str, Any], *, asked: str, unit: str = "") -> str:
    """Why the quota refused `asked` ("package", "start" or "storage"; `unit` names the unit a
    start was for), from the refusal's details, with what to do about it."""
    if details.get("largerThanQuota"):
        case = "larger"
    elif "requested" in details:
        case = "left"
    else:
        case = "full"
    words = REFUSALS[asked]
    limit = details.get("limit", "")
    return words.get(case, words["left"]).format(
        requested=details.get("requested"),
        used=details.get("used"),
        hard=details.get("hard"),
        what=LIMIT_NAMES.get(limit, limit),
        unit=unit,
    )
