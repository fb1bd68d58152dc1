"""The dashboard's writes in the audit log: the tenant acted for (a customer's own, the one
staff chose, a unit's owner), the thing acted on, and a refusal the page redirects with
recorded as a failure."""

from __future__ import annotations

import pytest
from django.urls import reverse

from dashboard.tests.conftest import client_for, make_user
from dashboard.tests.test_unit_lifecycle import OPERATION_ID, action_url, unit_in
from tenancy.models import AuditEvent
from tenancy.tests.test_sshkeys import ED25519

pytestmark = pytest.mark.django_db

KEYS = reverse("dashboard:ssh-key-list")


def test_staff_acting_for_a_tenant_are_recorded_for_it(other_tenant):
    staff = make_user(staff=True)
    unit = unit_in(other_tenant, name="theirs")
    response = client_for(staff).post(action_url(unit, "stop"), {"operation_id": OPERATION_ID})
    assert response.status_code == 302
    event = AuditEvent.objects.get()
    assert (event.source, event.actor_kind, event.actor) == ("dashboard", "user", staff.username)
    assert (event.tenant_id, event.tenant_slug) == (other_tenant.pk, other_tenant.slug)
    assert (event.action, event.target_kind, event.target_name) == ("units_stop", "units", "theirs")
    assert event.outcome == "success"


def test_a_refusal_the_page_redirects_with_is_a_failure(member_client, member, tenant):
    unit = unit_in(tenant, "Stopped")
    response = member_client.post(action_url(unit, "stop"), {"operation_id": OPERATION_ID})
    assert response.status_code == 302  # back to the unit, with the refusal in a message
    event = AuditEvent.objects.get()
    assert (event.action, event.actor, event.tenant_slug) == (
        "units_stop",
        member.username,
        tenant.slug,
    )
    assert (event.status, event.outcome) == (302, "failure")


def test_a_created_thing_is_named_and_a_refused_form_is_a_failure(member_client, tenant):
    assert member_client.post(KEYS, {"name": "laptop", "public_key": ED25519}).status_code == 302
    assert member_client.post(KEYS, {"name": "desk", "public_key": ED25519}).status_code == 200
    created, refused = AuditEvent.objects.order_by("id")
    assert (created.action, created.target_name, created.outcome) == (
        "ssh_keys_create",
        "laptop",
        "success",
    )
    assert (refused.action, refused.target_name, refused.outcome) == (
        "ssh_keys_create",
        "",
        "failure",
    )
    assert {created.tenant_slug, refused.tenant_slug} == {tenant.slug}


def test_staff_writes_for_the_tenant_they_chose(staff_client, other_tenant):
    url = f"{KEYS}?tenant={other_tenant.slug}"
    assert staff_client.post(url, {"name": "ops", "public_key": ED25519}).status_code == 302
    event = AuditEvent.objects.get()
    assert (event.tenant_slug, event.target_name) == (other_tenant.slug, "ops")


def test_signing_out_is_recorded_as_who_signed_out(member_client, member):
    assert member_client.post(reverse("dashboard:logout")).status_code == 302
    event = AuditEvent.objects.get()
    assert (event.action, event.actor, event.outcome) == ("logout", member.username, "success")
