"""The Reservations page: a tenant lists its reservations with what each holds, uses and has
free, makes one (the service's refusals next to the fields) and cancels one that has not
started; the order form takes a reservation's name."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from catalog.tests.factories import PackageFactory
from dashboard.tests.test_views import order
from runtime import reservations
from runtime.models import GPUUnit, Reservation, ReservationStatus
from tenancy.models import AuditEvent

pytestmark = pytest.mark.django_db

PAGE = "/reservations/"


def _form(package_id: str, **fields) -> dict:
    start = timezone.now() + timedelta(days=1)
    return {
        "name": "training",
        "package": package_id,
        "count": "2",
        "start": f"{start:%Y-%m-%dT%H:%M}",
        "end": f"{start + timedelta(hours=4):%Y-%m-%dT%H:%M}",
        "region": "",
        "at_end": "keep",
        **fields,
    }


def row_of(body: str, name: str) -> str:
    return body.split(f'data-reservation="{name}"')[1].split("</tr>")[0]


def test_a_tenant_makes_lists_and_cancels_a_reservation(member_client, tenant, other_tenant):
    package = PackageFactory(article=True)
    response = member_client.post(PAGE, _form(package.id))
    assert response.status_code == 302, response.content.decode()[-2000:]
    made = Reservation.objects.get(tenant=tenant, name="training")
    assert (made.count, made.package_id, made.status) == (2, package.id, "Scheduled")
    start = made.start
    reservations.create_reservation(
        tenant=other_tenant,
        name="theirs",
        package_id=package.id,
        count=1,
        start=start,
        end=start + timedelta(hours=1),
    )
    body = member_client.get(PAGE).content.decode()
    row = row_of(body, "training")
    for text in (
        'data-status="Scheduled">Scheduled</span>',
        f"<code>{package.id}</code>",
        'class="num reservation-free">2<',
        "Cancel<",
    ):
        assert text in row, text
    assert "theirs" not in body
    assert f'<a href="{PAGE}" aria-current="page">Reservations</a>' in body

    cancelled = member_client.post(f"{PAGE}training/cancel/")
    assert cancelled.status_code == 302
    made.refresh_from_db()
    assert made.status == ReservationStatus.CANCELLED
    assert "Cancel<" not in row_of(member_client.get(PAGE).content.decode(), "training")
    actions = set(
        AuditEvent.objects.filter(tenant=tenant, source="dashboard").values_list(
            "action", flat=True
        )
    )
    assert {"reservations_create", "reservations_delete"} <= actions


def test_refusals_are_shown_next_to_their_fields(member_client, tenant):
    package = PackageFactory(article=True)
    start = timezone.now() + timedelta(days=1)
    early = _form(package.id, end=f"{start - timedelta(hours=1):%Y-%m-%dT%H:%M}")
    body = member_client.post(PAGE, early).content.decode()
    assert 'id="id_end_error"' in body
    assert member_client.post(PAGE, _form(package.id)).status_code == 302
    again = member_client.post(PAGE, _form(package.id)).content.decode()
    assert 'id="id_name_error"' in again
    assert "A reservation named training exists." in again
    assert Reservation.objects.filter(tenant=tenant).count() == 1


def test_a_reservation_that_started_is_not_cancelled(member_client, tenant):
    package = PackageFactory(article=True)
    made = reservations.create_reservation(
        tenant=tenant,
        name="now",
        package_id=package.id,
        count=1,
        start=timezone.now() + timedelta(hours=1),
        end=timezone.now() + timedelta(hours=2),
    )
    Reservation.objects.filter(pk=made.pk).update(status=ReservationStatus.ACTIVE)
    response = member_client.post(f"{PAGE}now/cancel/", follow=True)
    assert "has started" in response.content.decode()
    made.refresh_from_db()
    assert made.status == ReservationStatus.ACTIVE


def test_the_order_form_names_a_reservation_and_shows_its_refusal(member_client, tenant):
    PackageFactory(article=True)
    body = order(member_client, reservation="nope").content.decode()
    assert 'id="id_reservation_error"' in body
    assert "No reservation of yours has this name." in body
    assert not GPUUnit.objects.filter(tenant=tenant).exists()
