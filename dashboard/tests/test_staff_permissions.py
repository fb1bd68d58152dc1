"""Staff see and act for every tenant only with Django permissions, carried by the groups the
docs/api.md names: staff-viewer reads every tenant, staff-editor acts for them too; a staff account
in neither gets 403 on every page and action that is about other tenants. Walked over every
dashboard route, so a new route has to say what it needs."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management.sql import emit_post_migrate_signal
from django.db import DEFAULT_DB_ALIAS
from django.test import Client
from django.urls import URLPattern, reverse

from dashboard import urls
from dashboard.tests.conftest import client_for, make_user
from dashboard.tests.test_ssh_keys import fresh_key
from dashboard.tests.test_storage import make_storage
from dashboard.tests.test_unit_lifecycle import OPERATION_ID, unit_in
from runtime.models import GPUStorage, GPUUnit, Operation, OperationKind, StoragePhase, UnitPhase
from tenancy import services, webhooks
from tenancy.models import ApiKey, SSHKey, Tenant, WebhookEndpoint
from tenancy.staff import STAFF_EDITOR, STAFF_VIEWER

pytestmark = pytest.mark.django_db

READ, ACT, OPEN = "read", "act", "open"
# What each dashboard route needs of a staff account: READ, the permission to see every tenant
# (a POST to it acts); ACT, the permission to act for them, whatever the method; OPEN, none
# (signing in and out, and picking one's own tenant, are not about other tenants).
ROUTES = {
    "overview": READ,
    "overview-live": READ,
    "unit-list": READ,
    "unit-rows": READ,
    "unit-create": ACT,
    "unit-detail": READ,
    "unit-live": READ,
    "unit-stop": ACT,
    "unit-start": ACT,
    "unit-restart": ACT,
    "unit-edit": ACT,
    "unit-delete": ACT,  # after the others: the editor's walk deletes the unit here
    "unit-log": READ,
    "unit-log-live": READ,
    "package-list": READ,
    "package-live": READ,
    "usage": READ,
    "statement": READ,
    "statement-month": READ,
    "statement-csv": READ,
    "ssh-key-list": READ,
    "ssh-key-delete": ACT,
    "storage-list": READ,
    "storage-live": READ,
    "storage-delete": ACT,
    "reservation-list": READ,
    "reservation-live": READ,
    "reservation-cancel": ACT,
    "secret-list": READ,
    "secret-live": READ,
    "secret-delete": ACT,
    "ssh-key-live": READ,
    "api-key-list": READ,
    "api-key-live": READ,
    "api-key-revoke": ACT,
    "webhook-list": READ,
    "webhook-live": READ,
    "webhook-delete": ACT,
    "webhook-deliveries": READ,
    "webhook-test": ACT,
    "webhook-rotate": ACT,
    "choose-tenant": OPEN,
    "login": OPEN,
    "logout": OPEN,
}


@pytest.fixture
def world(other_tenant, monkeypatch, settings):
    """Another tenant's unit, SSH key, storage, API key and webhook, as every staff-only page
    reaches them."""
    monkeypatch.setattr("dashboard.logtail.logs.read", lambda unit, options: b"hello\n")
    unit = unit_in(other_tenant)
    key = services.add_ssh_key(tenant=other_tenant, name="laptop", public_key=fresh_key())
    storage = make_storage(other_tenant, "scratch")
    api_key, _ = services.create_api_key(tenant=other_tenant, name="ci")
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    hook = webhooks.create_endpoint(
        tenant=other_tenant, url="http://127.0.0.1:9/hook", events=["*"]
    )
    return {
        "uid": unit.uid,
        "key": key.name,
        "storage": storage.name,
        "api-key": api_key.prefix,
        "webhook": str(hook.uid),
        "tenant": other_tenant,
    }


def address(name: str, world: dict) -> str:
    """The route's address for the world's things, for the world's tenant (`?tenant=`, as staff
    pick it on the tenant pages; other pages ignore it)."""
    pattern = next(p for p in urls.urlpatterns if isinstance(p, URLPattern) and p.name == name)
    converters = pattern.pattern.converters  # type: ignore[attr-defined]
    kwargs: dict[str, object] = {}
    if "uid" in converters:
        kwargs["uid"] = world["uid"]
    if "month" in converters:
        kwargs["month"] = "2026-11"
    if "key" in converters:
        kind = name.rsplit("-", 1)[0]
        kwargs["key"] = world.get(kind, world["storage"] if kind == "storage" else world["key"])
    return f"{reverse(f'dashboard:{name}', kwargs=kwargs)}?tenant={world['tenant'].slug}"


def staff(*groups: str) -> Client:
    return client_for(make_user(staff=True, groups=groups))


def routes(*kinds: str) -> list[str]:
    return [name for name, kind in ROUTES.items() if kind in kinds]


def answers(client: Client, names: list[str], world: dict) -> dict[tuple[str, str], int]:
    """(route, method) → status, for a GET and an empty POST to each route."""
    statuses = {}
    for name in names:
        url = address(name, world)
        statuses[(name, "GET")] = client.get(url).status_code
        statuses[(name, "POST")] = client.post(url, {"operation_id": OPERATION_ID}).status_code
    return statuses


def nothing_changed(world: dict) -> None:
    unit = GPUUnit.objects.get(uid=world["uid"])
    assert unit.phase == UnitPhase.RUNNING
    assert not Operation.objects.filter(unit=unit).exclude(kind=OperationKind.CREATE).exists()
    assert SSHKey.objects.filter(tenant=world["tenant"], name=world["key"]).exists()
    storage = GPUStorage.objects.get(tenant=world["tenant"], name=world["storage"])
    assert storage.phase == StoragePhase.BOUND
    assert GPUUnit.objects.count() == 1
    assert ApiKey.objects.get(prefix=world["api-key"]).revoked_at is None
    assert WebhookEndpoint.objects.filter(uid=world["webhook"]).exists()


def test_every_dashboard_route_says_what_staff_need_for_it():
    named = {p.name for p in urls.urlpatterns if isinstance(p, URLPattern)}
    assert named == set(ROUTES)


def test_staff_without_permission_get_403_on_every_staff_page_and_action(world):
    client = staff()
    statuses = answers(client, routes(READ, ACT), world)

    assert dict.fromkeys(statuses, 403) == statuses
    nothing_changed(world)
    # Nothing to choose either: the account sees no tenant.
    assert client.get(reverse("dashboard:choose-tenant")).status_code == 403
    page = client.get(reverse("dashboard:overview")).content.decode()
    assert "staff-viewer" in page  # what to ask for


def test_a_viewer_reads_every_tenant_and_acts_for_none(world):
    client = staff(STAFF_VIEWER)

    reads = {name: client.get(address(name, world)).status_code for name in routes(READ)}
    assert dict.fromkeys(reads, 200) == reads
    acts = answers(client, routes(ACT), world)
    posts = {(name, "POST"): client.post(address(name, world)).status_code for name in routes(READ)}
    assert dict.fromkeys(acts | posts, 403) == acts | posts
    nothing_changed(world)
    assert "may look, not act" in client.get(address("unit-stop", world)).content.decode()


def test_a_viewer_is_offered_no_action(world):
    client = staff(STAFF_VIEWER)

    unit_page = client.get(address("unit-detail", world)).content.decode()
    assert "Status:" in unit_page  # the other tenant's unit, shown
    for name in ("unit-delete", "unit-stop", "unit-start", "unit-restart", "unit-edit"):
        assert reverse(f"dashboard:{name}", args=[world["uid"]]) not in unit_page
    everywhere = "".join(
        client.get(address(name, world)).content.decode()
        for name in ("overview", "unit-list", "package-list", "ssh-key-list", "storage-list")
    )
    assert world["key"] in everywhere
    assert world["storage"] in everywhere
    assert reverse("dashboard:unit-create") not in everywhere
    assert "/delete/" not in everywhere
    assert "Add a key" not in everywhere
    assert "Create a storage" not in everywhere


def test_an_editor_acts_for_every_tenant(world):
    client = staff(STAFF_EDITOR)

    statuses = answers(client, routes(READ, ACT), world)
    assert not [key for key, status in statuses.items() if status == 403]
    unit = GPUUnit.objects.get(uid=world["uid"])
    assert Operation.objects.filter(unit=unit, kind=OperationKind.STOP).exists()
    assert unit.phase == UnitPhase.TERMINATING  # deletion requested
    assert not SSHKey.objects.filter(tenant=world["tenant"], name=world["key"]).exists()
    storage = GPUStorage.objects.get(tenant=world["tenant"], name=world["storage"])
    assert storage.phase == StoragePhase.TERMINATING
    assert ApiKey.objects.get(prefix=world["api-key"]).revoked_at is not None
    assert not WebhookEndpoint.objects.filter(uid=world["webhook"]).exists()


def test_a_superuser_acts_without_any_group(world):
    admin = User.objects.create_superuser("root", password="a-long-test-password")
    client = client_for(admin)

    assert client.get(address("unit-stop", world)).status_code == 200
    client.post(address("unit-stop", world), {"operation_id": OPERATION_ID})
    assert Operation.objects.filter(kind=OperationKind.STOP).exists()


def test_tenant_members_act_for_their_own_tenant_without_any_permission(tenant):
    unit = unit_in(tenant)
    client = client_for(make_user(tenant))

    assert client.get(reverse("dashboard:unit-stop", args=[unit.uid])).status_code == 200
    client.post(reverse("dashboard:unit-stop", args=[unit.uid]), {"operation_id": OPERATION_ID})
    assert Operation.objects.filter(unit=unit, kind=OperationKind.STOP).exists()
    assert client.post(reverse("dashboard:ssh-key-list"), {"name": "k"}).status_code == 200


def test_staff_without_permission_act_for_their_own_tenant_only(tenant, other_tenant: Tenant):
    mine, theirs = unit_in(tenant), unit_in(other_tenant)
    client = client_for(make_user(tenant, staff=True, groups=()))

    assert client.get(reverse("dashboard:unit-stop", args=[mine.uid])).status_code == 200
    assert client.get(reverse("dashboard:unit-detail", args=[theirs.uid])).status_code == 404


def codenames(group: str) -> set[str]:
    return set(Group.objects.get(name=group).permissions.values_list("codename", flat=True))


def test_the_groups_carry_the_permissions_the_readme_names():
    assert codenames(STAFF_VIEWER) == {"view_every_tenant"}
    assert codenames(STAFF_EDITOR) == {"view_every_tenant", "act_for_every_tenant"}


def test_migrate_makes_a_missing_group_again_and_leaves_a_kept_one_as_it_is():
    Group.objects.filter(name=STAFF_VIEWER).delete()
    Group.objects.get(name=STAFF_EDITOR).permissions.remove(
        Permission.objects.get(codename="act_for_every_tenant")
    )

    emit_post_migrate_signal(verbosity=0, interactive=False, db=DEFAULT_DB_ALIAS)

    assert codenames(STAFF_VIEWER) == {"view_every_tenant"}
    assert codenames(STAFF_EDITOR) == {"view_every_tenant"}  # as the admins left it
