"""Usage rows carry the region of the unit's cluster (ARCHITECTURE §20): the meter takes it
when it opens, every row written from it (closed, sealed, corrected) keeps it, and the exports
name it (FOCUS RegionId/RegionName, CloudEvents data.region)."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from billing import exporting, ledger, periods
from billing.models import Meter, UsageRecord
from billing.tests.helpers import claim_of, hold, pod_of, priced
from runtime.control import metering
from runtime.models import UnitPhase
from runtime.tests.factories import UnitFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def started() -> datetime:
    """Within the last hour that has ended: a run from here that lasts minutes is one row."""
    return periods.floor_hour(timezone.now()) - timedelta(minutes=30)


def exported(fmt_name: str, start: datetime) -> bytes:
    out = io.BytesIO()
    exporting.copy_to(fmt_name, start - timedelta(hours=1), start + timedelta(hours=1), out)
    return out.getvalue()


def test_rows_carry_the_units_region_when_a_reconcile_meters_a_pod_open_to_close(tenant, started):
    package = priced("h100-1x", "3.60")
    unit = UnitFactory(
        tenant=tenant, name="east", package=package, phase=UnitPhase.RUNNING, region="us-east"
    )
    claim = claim_of(1)

    opened = metering.settle_meters([(unit, claim, pod_of("p1", started), None)], backstop=False)
    assert opened == (1, 0)
    assert Meter.objects.get(unit_uid=unit.uid).region == "us-east"
    ended = pod_of("p1", started, started + timedelta(minutes=2))
    assert metering.settle_meters([(unit, claim, ended, None)], backstop=False) == (0, 1)

    (row,) = UsageRecord.objects.filter(unit_uid=unit.uid)
    assert (row.start, row.end) == (started, started + timedelta(minutes=2))
    assert row.region == "us-east"


def test_sealed_hours_and_corrections_keep_the_region_when_a_meter_runs_on(tenant):
    # One clock reading, so that no hour's boundary passes between the start and the seal.
    now = timezone.now()
    started = periods.floor_hour(now) - timedelta(minutes=30)
    package = priced("h100-1x", "3.60")
    unit = UnitFactory(
        tenant=tenant, name="east", package=package, phase=UnitPhase.RUNNING, region="us-east"
    )
    metering.settle_meters([(unit, claim_of(1), pod_of("p1", started), None)], backstop=False)

    assert ledger.seal_meters(now=now) == 1
    (sealed,) = UsageRecord.objects.filter(unit_uid=unit.uid)
    assert sealed.region == "us-east"
    assert ledger.reverse(sealed, note="a test's correction").region == "us-east"
    assert set(UsageRecord.objects.filter(unit_uid=unit.uid).values_list("region", flat=True)) == {
        "us-east"
    }


def test_exports_name_the_region_and_leave_it_empty_when_a_row_has_none(tenant, started):
    package = priced("h100-1x", "3.60")
    east = UnitFactory(tenant=tenant, name="east", package=package, region="us-east")
    # Ordered before the registry: no cluster or region kept.
    before = UnitFactory(tenant=tenant, name="before", package=package, cluster="", region="")
    hold(east, started, started + timedelta(minutes=2))
    hold(before, started + timedelta(minutes=5), started + timedelta(minutes=7))

    reader = csv.DictReader(io.StringIO(exported("focus-csv", started).decode()))
    rows = {row["ResourceName"]: row for row in reader}
    # Where FOCUS puts them among its columns (alphabetical, the x_ ones last).
    header = reader.fieldnames or []
    assert header.index("RegionId") == header.index("PublisherName") + 1
    assert header.index("RegionName") == header.index("ResourceId") - 1
    assert (rows["east"]["RegionId"], rows["east"]["RegionName"]) == ("us-east", "us-east")
    assert (rows["before"]["RegionId"], rows["before"]["RegionName"]) == ("", "")
    # Empty is NULL in COPY's CSV: empty fields (PublisherName, then the two), not "".
    text = exported("focus-csv", started).decode()
    assert f"{exporting.PROVIDER},,,{before.uid}," in text

    events = [json.loads(line) for line in exported("cloudevents", started).splitlines()]
    regions = {event["data"]["unit"]: event["data"]["region"] for event in events}
    assert regions == {"east": "us-east", "before": ""}
