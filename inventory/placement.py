"""Placement (ARCHITECTURE §20): which cluster a new unit goes to. Pure: the caller reads the
registry, the mirror and the package, and binds the unit to the answer once and for all.

Filters, in order, each with the refusal a customer sees when it leaves nothing:
  1. the region asked, if any, exists                           -> unknown_region (400)
  2. the package is sold there (a package sold nowhere listed: everywhere)
                                                                 -> not_sold (400) when a
     region was asked, else region_unavailable (503): its regions have no cluster yet
  3. the cluster is enabled, not cordoned, not unreachable       -> region_unavailable (503)
  4. the tenant's device quota in the cluster's region, if it has one there, takes the unit
                                                                 -> quota_exceeded (409)
  5. the package is placeable there now, per the mirror less what was placed there since
                                                                 -> insufficient_capacity (409)
Scores of what is left: most units placeable now, then most free matching devices, then the
order ops set (position), then the name: the same inputs always give the same cluster.

With one cluster registered nothing is chosen: an order it cannot place now waits there
(Pending) as it did before clusters were registered, rather than being refused."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """A registered cluster as placement sees it."""

    name: str
    region: str
    position: int = 100
    enabled: bool = True
    cordoned: bool = False
    unreachable: bool = False
    placeable: int = 0  # more units of the package the cluster can take now
    free_devices: int = 0
    known: bool = True  # the mirror has an answer for the package (else: not refused for it)


@dataclass(frozen=True)
class Placed:
    cluster: str
    region: str


@dataclass(frozen=True)
class Refused:
    # unknown_region | not_sold | region_unavailable | quota_exceeded | insufficient_capacity
    # | elsewhere (its storages live in clusters it cannot run in)
    code: str
    message: str
    regions: list[str]


def place(
    candidates: Sequence[Candidate],
    *,
    package: str,
    sold_in: Sequence[str],
    region: str = "",
    devices: int = 0,
    room: Mapping[str, int] | None = None,
    within: Collection[str] | None = None,
) -> Placed | Refused:
    """The cluster a unit of `package` (sold in `sold_in`; empty: everywhere; `devices` of
    them) goes to, asked for `region` (empty: any), or why none. `room`: the devices the
    tenant may still hold per region where it has a quota (a region not in it: no limit).
    `within`: the only clusters it may run in (where its storages live), when given."""
    known_regions = sorted({c.region for c in candidates if c.enabled})
    pool = [c for c in candidates if c.enabled]
    if within is not None:
        held = [c for c in pool if c.name in within]
        if not held or (region and all(c.region != region for c in held)):
            asked = f' (region "{region}" asked)' if region else ""
            return Refused(
                "elsewhere",
                f"The unit mounts storages of cluster {', '.join(sorted(within))}, where it "
                f"cannot run{asked}.",
                sorted({c.region for c in held} | ({region} if region else set())),
            )
        pool = held
    if region:
        if region not in known_regions:
            return Refused(
                "unknown_region",
                f'There is no region "{region}"; regions: {", ".join(known_regions) or "none"}.',
                [region],
            )
        pool = [c for c in pool if c.region == region]
    if sold_in:
        sold = [c for c in pool if c.region in sold_in]
        if not sold and region:
            return Refused(
                "not_sold",
                f'Package "{package}" is not sold in region "{region}"; it is sold in '
                f"{', '.join(sorted(sold_in))}.",
                [region],
            )
        if not sold:  # on sale, but no region it is sold in has a cluster taking part
            regions = sorted(sold_in)
            return Refused(
                "region_unavailable",
                f'Package "{package}" is sold in {_regions(regions)}, where no cluster takes '
                "new units now; try again later.",
                regions,
            )
        pool = sold
    tried = sorted({c.region for c in pool})
    open_ = [c for c in pool if not c.cordoned and not c.unreachable]
    if not open_:
        return Refused(
            "region_unavailable",
            f"No cluster of {_regions(tried)} takes new units now (unreachable or cordoned); "
            "try again later.",
            tried,
        )
    if room:
        open_ = [c for c in open_ if room.get(c.region, devices) >= devices]
        if not open_:
            return Refused(
                "quota_exceeded",
                f"Your device quota in {_regions(tried)} has no room for {devices} more "
                "device(s). Delete a unit there, order in another region, or ask us to raise "
                "the quota.",
                tried,
            )
    ranked = sorted(open_, key=_score)
    if sum(1 for c in candidates if c.enabled) == 1:
        return Placed(ranked[0].name, ranked[0].region)
    fitting = [c for c in ranked if c.placeable > 0 or not c.known]
    if not fitting:
        return Refused(
            "insufficient_capacity",
            f'No cluster of {_regions(tried)} has room for package "{package}" now: the most '
            f"free devices of its kind in one cluster is {max(c.free_devices for c in ranked)}. "
            "GET /regions shows where it fits now: order it there, pick a smaller package, or "
            "try again later.",
            tried,
        )
    return Placed(fitting[0].name, fitting[0].region)


def _score(candidate: Candidate) -> tuple:
    return (-candidate.placeable, -candidate.free_devices, candidate.position, candidate.name)


def _regions(names: Sequence[str]) -> str:
    if len(names) == 1:
        return f'region "{names[0]}"'
    return "regions " + ", ".join(f'"{n}"' for n in names)
