"""The ledger's contract, over random lives of units in simulated time (time-machine): the
customer's actions go through the runtime's own services (stop, start, restart, delete), the
cluster's side through the phase transitions the observer and reconcile make (Running,
Stopped, device loss, Terminated), and beat's through `seal_meters` and the reconcile's
`reconcile_meters`; some events are missed (a phase written without its transition), as when
the observer is down. Whatever happens:

- a unit's rows never overlap, each lies within one UTC hour and is priced by the version
  in force at its start;
- with no missed event, the rows tile exactly the time the unit was Running (no gap) and
  their total is that time;
- a missed start is metered from the next full reconcile, a missed end closed at the last
  time a reconcile saw the unit Running (or when it reached Running again): never is time
  billed when the unit was not Running. (A missed end followed by a missed start with no
  reconcile between looks like a unit that ran throughout, its claim allocated all along,
  and is billed so; those sequences are not generated.)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db.models import F
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from billing import ledger, periods
from billing.models import Meter, PriceVersion, UsageRecord
from catalog.tests.factories import PackageFactory
from controlplane.errors import DomainError
from runtime import actions, lifecycle, orders
from runtime.models import GPUUnit, Operation, OperationKind, OperationStatus, UnitPhase
from tenancy.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

DEVICES = [
    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0"},
    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-1"},
]
# Phases a unit waits for its pod in (a created unit is Accepted until a worker takes it).
WAITING = (UnitPhase.ACCEPTED, UnitPhase.PROVISIONING, UnitPhase.PENDING)
STEPS = [
    "observe_running",
    "stop",
    "observe_stopped",
    "start",
    "restart",
    "device_loss",
    "delete",
    "observe_terminated",
    "missed_start",
    "missed_end",
    "reconcile",
    "seal",
    "price_change",
]


@dataclass
class Truth:
    """What the ledger must say about one unit, kept beside it by the same rules."""

    intervals: list[tuple[datetime, datetime]] = field(default_factory=list)
    metered_since: datetime | None = None  # the meter the ledger should have open
    seen_at: datetime | None = None
    running_since: datetime | None = None  # the unit as the database says
    running: list[tuple[datetime, datetime]] = field(default_factory=list)
    missed: bool = False

    def close(self, at: datetime) -> None:
        if self.metered_since is not None and at > self.metered_since:
            self.intervals.append((self.metered_since, at))
        self.metered_since = self.seen_at = None

    def enter_running(self, at: datetime) -> None:
        self.running_since = at

    def leave_running(self, at: datetime) -> None:
        if self.running_since is not None and at > self.running_since:
            self.running.append((self.running_since, at))
        self.running_since = None


class World:
    def __init__(self, start: datetime, clock: time_machine.Coordinates) -> None:
        self.clock = clock
        self.now = start
        self.tenant = TenantFactory()
        self.package = PackageFactory(
            id=f"p-{self.tenant.slug}", gpu=2, count=2, cpu="1", memory="1Gi", price="2.40"
        )
        self.unit = orders.create_unit(
            tenant=self.tenant,
            operation_id="create",
            name="u",
            package_id=self.package.id,
            image="busybox",
        ).unit
        GPUUnit.objects.filter(pk=self.unit.pk).update(claim_k8s_uid="claim-1", unit_k8s_uid="x")
        self.workers_done()
        self.truth = Truth()
        self.ops = itertools.count()
        self.actions = 0

    def workers_done(self) -> None:
        """The workers carried out what was asked (their cluster side is the observe steps),
        so the next action is not refused as operation_in_progress."""
        Operation.objects.filter(unit=self.unit, status__in=OperationStatus.OPEN).exclude(
            kind=OperationKind.DELETE
        ).update(status=OperationStatus.SUCCEEDED)
        GPUUnit.objects.filter(pk=self.unit.pk).update(observed_generation=F("generation"))

    def fresh(self) -> GPUUnit:
        return GPUUnit.objects.get(pk=self.unit.pk)

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        self.clock.move_to(self.now)

    def step(self, name: str) -> None:
        unit = self.fresh()
        truth = self.truth
        now = self.now
        phase = unit.phase
        if name == "observe_running" and phase in WAITING:
            dra = {"claimName": unit.claim_name, "allocated": True, "devices": DEVICES}
            if lifecycle.transition_unit(unit, to=UnitPhase.RUNNING, reason="Running", dra=dra):
                if truth.metered_since is not None:  # a missed end: closed at last seen
                    truth.close(max(truth.seen_at or truth.metered_since, truth.metered_since))
                truth.metered_since = truth.seen_at = now
                truth.enter_running(now)
        elif name in ("stop", "start", "restart"):
            try:
                actions.request_action(
                    tenant=self.tenant, name="u", kind=name, operation_id=f"op-{next(self.ops)}"
                )
            except DomainError:
                return
            self.actions += 1
            self.workers_done()
            if phase == UnitPhase.RUNNING:
                truth.close(now)
                truth.leave_running(now)
        elif name == "observe_stopped" and phase == UnitPhase.STOPPING:
            lifecycle.transition_unit(unit, to=UnitPhase.STOPPED, reason="Stopped")
        elif name == "device_loss" and phase == UnitPhase.RUNNING:
            lifecycle.transition_unit(unit, to=UnitPhase.FAILED, reason="DeviceUnhealthy")
            truth.close(now)
            truth.leave_running(now)
        elif name == "delete" and phase not in (UnitPhase.TERMINATING, UnitPhase.TERMINATED):
            lifecycle.request_unit_deletion(tenant=self.tenant, name="u")
            if phase == UnitPhase.RUNNING:
                truth.close(now)
                truth.leave_running(now)
        elif name == "observe_terminated" and phase == UnitPhase.TERMINATING:
            lifecycle.mark_unit_terminated(unit)
        elif name == "missed_start" and phase in WAITING and truth.metered_since is None:
            # (Its end missed too, with no reconcile between, the unit looks to the ledger as
            # if it had run throughout: its claim stayed allocated. Not generated here.)
            GPUUnit.objects.filter(pk=unit.pk).update(phase=UnitPhase.RUNNING)
            truth.enter_running(now)
            truth.missed = True
        elif name == "missed_end" and phase == UnitPhase.RUNNING:
            # The container restarted and the observer missed it: Pending, its meter open.
            GPUUnit.objects.filter(pk=unit.pk).update(phase=UnitPhase.PENDING, reason="Missed")
            truth.leave_running(now)
            truth.missed = True
        elif name == "reconcile":
            lifecycle.reconcile_meters([unit], seen_at=now)
            if phase == UnitPhase.RUNNING:
                if truth.metered_since is None:
                    truth.metered_since = truth.seen_at = now
                else:
                    truth.seen_at = now
            elif truth.metered_since is not None:
                truth.close(max(truth.seen_at or truth.metered_since, truth.metered_since))
        elif name == "seal":
            ledger.seal_meters(now=now)
        elif name == "price_change":
            self.package.price = (Decimal(self.package.price) + Decimal("0.30")).quantize(
                Decimal("0.01")
            )
            self.package.save()

    def finish(self) -> None:
        """Close what is open the way the ledger would, then the truth likewise."""
        unit = self.fresh()
        if unit.phase == UnitPhase.RUNNING:
            lifecycle.request_unit_deletion(tenant=self.tenant, name="u")
            self.truth.close(self.now)
            self.truth.leave_running(self.now)
        else:
            lifecycle.reconcile_meters([unit], seen_at=self.now)
            if self.truth.metered_since is not None:
                seen = self.truth.seen_at or self.truth.metered_since
                self.truth.close(max(seen, self.truth.metered_since))


def merged(intervals: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    out: list[tuple[datetime, datetime]] = []
    for start, end in sorted(intervals):
        if out and out[-1][1] == start:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    start=st.datetimes(
        min_value=datetime(2026, 11, 30, 20), max_value=datetime(2026, 12, 1, 3)
    ).map(lambda moment: moment.replace(tzinfo=UTC)),
    steps=st.lists(
        st.tuples(
            st.sampled_from(STEPS),
            st.one_of(
                st.floats(min_value=0.001, max_value=5), st.floats(min_value=60, max_value=9000)
            ),
        ),
        min_size=1,
        max_size=30,
    ),
)
@example(  # a price change mid-run, a stop and start, an hour sealed, a missed end
    start=datetime(2026, 11, 30, 22, 50, tzinfo=UTC),
    steps=[
        ("observe_running", 1),
        ("price_change", 100),
        ("stop", 100),
        ("observe_stopped", 5),
        ("start", 5),
        ("observe_running", 5),
        ("reconcile", 900),
        ("seal", 5),
        ("missed_end", 60),
        ("reconcile", 30),
        ("delete", 5),
    ],
)
def test_the_ledger_holds_exactly_the_running_time(start, steps):
    with time_machine.travel(start, tick=False) as clock:
        world = World(start, clock)
        for name, wait in steps:
            world.advance(wait)
            world.step(name)
        world.advance(1)
        world.finish()
    uid = world.unit.uid
    assert not Meter.objects.filter(unit_uid=uid).exists()
    rows = list(UsageRecord.objects.filter(unit_uid=uid).order_by("start"))
    versions = sorted(
        PriceVersion.objects.filter(package_id=world.package.id, alternative=""),
        key=lambda v: v.effective_from,
    )
    for row in rows:
        assert row.start < row.end
        assert row.end - periods.floor_hour(row.start) <= periods.HOUR
        assert row.quantity == row.seconds * 2
        in_force = periods.in_force(versions, row.start)
        assert in_force is not None
        assert row.hourly == in_force.hourly
        assert row.cost == periods.cost(row.seconds, row.hourly)
        # A price change mid-row would have split it.
        assert not [v for v in versions if row.start < v.effective_from < row.end]
    for earlier, later in itertools.pairwise(rows):
        assert earlier.end <= later.start  # no overlap
    held = merged([(row.start, row.end) for row in rows])
    assert held == merged(world.truth.intervals)
    total = sum((row.seconds for row in rows), Decimal(0))
    expected = sum((periods.seconds(a, b) for a, b in world.truth.intervals), Decimal(0))
    assert abs(total - expected) <= 1
    running = merged(world.truth.running)
    if not world.truth.missed:
        # No event missed: no gap while Running, and nothing else.
        assert held == running
    # Never billed while not Running.
    for start_, end_ in held:
        assert any(a <= start_ and end_ <= b for a, b in running), (start_, end_, running)
