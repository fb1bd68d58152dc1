"""Dashboard views: who sees what, ordering and deleting through the forms, live fragments,
plain-language reasons, and SQL statement counts that stay flat as units grow."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from billing import periods
from dashboard.templatetags.dashboard_units import countdown
from dashboard.tests.conftest import PASSWORD, client_for, make_unit, make_user
from inventory.models import Device, InventorySnapshot, Node, PackageAvailability, SyncRun
from runtime.models import GPUUnit, Operation, UnitPhase
from tenancy.tests.factories import TenantFactory
from tests.endpoints import recording

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
LOGOUT = "/accounts/logout/"
OVERVIEW = "/"
UNITS = "/units/"
ROWS = "/units/live/"
NEW = "/units/new"
PACKAGES = "/packages/"
CHOOSE = "/tenant/"


def detail(unit: GPUUnit) -> str:
    return f"/units/{unit.uid}/"


def live(unit: GPUUnit) -> str:
    return f"/units/{unit.uid}/live/"


def delete(unit: GPUUnit) -> str:
    return f"/units/{unit.uid}/delete/"


def order(client: Client, **fields) -> object:
    body = {
        "package": "gpu-rtx3080-2x-cpu10-mem40g",
        "name": "demo",
        "image": "python:3.12",
        "operation_id": "dash-" + "a" * 32,
        **fields,
    }
    return client.post(NEW, body)


class TestSignIn:
    @pytest.mark.parametrize("path", [OVERVIEW, UNITS, ROWS, NEW, PACKAGES])
    def test_pages_redirect_to_login_when_anonymous(self, client, path):
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"] == f"{LOGIN}?next={path}"

    def test_unit_pages_redirect_to_login_when_anonymous(self, client, tenant):
        unit = make_unit(tenant, "demo")
        for path in (detail(unit), live(unit), delete(unit)):
            assert client.get(path)["Location"].startswith(f"{LOGIN}?next=")
        assert client.post(delete(unit)).status_code == 302
        unit.refresh_from_db()
        assert unit.phase == UnitPhase.RUNNING

    def test_poll_moves_the_page_to_login_when_the_session_ended(self, client):
        response = client.get(
            ROWS, headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/units/"}
        )
        assert response.status_code == 200
        assert response["HX-Redirect"] == f"{LOGIN}?next=/units/"

    def test_login_form_signs_in_and_logout_is_post_only(self, client, member):
        page = client.get(LOGIN)
        assert page.status_code == 200
        assert b'<label for="id_username">' in page.content
        assert b"csrfmiddlewaretoken" in page.content
        response = client.post(LOGIN, {"username": member.username, "password": PASSWORD})
        assert response.status_code == 302
        assert response["Location"] == OVERVIEW
        assert client.get(OVERVIEW).status_code == 200
        assert client.get(LOGOUT).status_code == 405
        assert client.post(LOGOUT)["Location"] == LOGIN
        assert client.get(OVERVIEW).status_code == 302

    def test_wrong_password_is_reported(self, client, member):
        response = client.post(LOGIN, {"username": member.username, "password": "nope"})
        assert response.status_code == 200
        assert b"enter a correct username and password" in response.content

    def test_forms_reject_posts_without_csrf_token(self, member, tenant, package):
        unit = make_unit(tenant, "demo")
        strict = client_for(member, enforce_csrf_checks=True)
        assert order(strict, name="other").status_code == 403
        assert strict.post(delete(unit)).status_code == 403
        assert strict.post(LOGOUT).status_code == 403
        assert GPUUnit.objects.count() == 1


class TestScope:
    def test_user_without_tenant_sees_a_clear_message(self):
        response = client_for(make_user()).get(UNITS)
        assert response.status_code == 403
        assert b"not linked to a tenant" in response.content

    def test_tenant_user_lists_only_its_own_units(self, member_client, tenant, other_tenant):
        make_unit(tenant, "mine")
        make_unit(other_tenant, "theirs")
        for path in (UNITS, ROWS):
            body = member_client.get(path).content.decode()
            assert 'data-unit="mine"' in body
            assert "theirs" not in body

    def test_tenant_user_gets_404_for_another_tenants_unit(self, member_client, other_tenant):
        unit = make_unit(other_tenant, "theirs")
        for path in (detail(unit), live(unit), delete(unit)):
            response = member_client.get(path)
            assert response.status_code == 404
            assert b"theirs" not in response.content
        assert member_client.post(delete(unit)).status_code == 404
        unit.refresh_from_db()
        assert unit.phase == UnitPhase.RUNNING
        assert not Operation.objects.exists()

    def test_tenant_filter_is_ignored_for_tenant_users(self, member_client, other_tenant):
        make_unit(other_tenant, "theirs")
        body = member_client.get(UNITS, {"tenant": other_tenant.slug}).content
        assert b"theirs" not in body
        assert b'name="tenant"' not in body

    def test_staff_see_every_tenant_and_filter_by_tenant(self, staff_client, tenant, other_tenant):
        make_unit(tenant, "mine")
        make_unit(other_tenant, "theirs")
        body = staff_client.get(UNITS).content.decode()
        assert 'data-unit="mine"' in body
        assert 'data-unit="theirs"' in body
        assert '<select name="tenant"' in body
        filtered = staff_client.get(UNITS, {"tenant": other_tenant.slug}).content.decode()
        assert 'data-unit="theirs"' in filtered
        assert 'data-unit="mine"' not in filtered
        unit = GPUUnit.objects.get(name="theirs")
        assert staff_client.get(detail(unit)).status_code == 200

    def test_user_in_several_tenants_chooses_one(self, tenant, other_tenant):
        make_unit(tenant, "first")
        make_unit(other_tenant, "second")
        client = client_for(make_user(tenant, other_tenant))
        response = client.get(UNITS)
        assert response.status_code == 302
        assert response["Location"] == f"{CHOOSE}?next=%2Funits%2F"
        chooser = client.get(response["Location"]).content.decode()
        assert f'value="{tenant.slug}"' in chooser
        assert f'value="{other_tenant.slug}"' in chooser
        chosen = client.post(CHOOSE, {"tenant": other_tenant.slug, "next": UNITS})
        assert chosen["Location"] == UNITS
        body = client.get(UNITS).content.decode()
        assert 'data-unit="second"' in body
        assert 'data-unit="first"' not in body

    def test_user_cannot_choose_a_tenant_it_is_not_linked_to(self, tenant, other_tenant):
        third = TenantFactory()
        client = client_for(make_user(tenant, other_tenant))
        client.post(CHOOSE, {"tenant": third.slug, "next": UNITS})
        assert client.get(UNITS).status_code == 302

    def test_chooser_does_not_redirect_off_site(self, tenant, other_tenant):
        client = client_for(make_user(tenant, other_tenant))
        response = client.post(
            CHOOSE,
            {"tenant": tenant.slug, "next": "https://evil.example/"},
        )
        assert response["Location"] == OVERVIEW


class TestUnitList:
    def test_filters_by_phase_and_package(self, member_client, tenant):
        make_unit(tenant, "running")
        make_unit(tenant, "pending", phase=UnitPhase.PENDING, reason="NoMatchingDevices")
        make_unit(tenant, "big", package_id="gpu-h100-8x")
        body = member_client.get(UNITS, {"phase": "Pending"}).content.decode()
        assert 'data-unit="pending"' in body
        assert 'data-unit="running"' not in body
        body = member_client.get(UNITS, {"package": "gpu-h100-8x"}).content.decode()
        assert 'data-unit="big"' in body
        assert 'data-unit="running"' not in body
        assert '<option value="gpu-h100-8x" selected>' in body

    def test_page_polls_the_live_fragment_with_its_filters(self, member_client, tenant):
        make_unit(tenant, "running")
        body = member_client.get(UNITS, {"phase": "Running"}).content.decode()
        assert f'hx-get="{ROWS}?phase=Running"' in body
        assert 'hx-trigger="every 3s' in body
        assert 'aria-live="polite"' in body
        assert "django_htmx/htmx-2.min.js" in body

    def test_fragment_answers_204_until_a_phase_changes(self, member_client, tenant):
        unit = make_unit(tenant, "demo", phase=UnitPhase.PROVISIONING)
        first = member_client.get(ROWS)
        assert first.status_code == 200
        since = first.context["live"]["digest"]
        assert member_client.get(ROWS, {"since": since}).status_code == 204
        GPUUnit.objects.filter(pk=unit.pk).update(phase=UnitPhase.RUNNING)
        changed = member_client.get(ROWS, {"since": since})
        assert changed.status_code == 200
        body = changed.content.decode()
        assert 'data-phase="Running"' in body
        assert "<html" not in body
        assert 'hx-swap-oob="innerHTML"' in body
        assert "1 Running" in body

    def test_terminated_units_are_left_out_until_asked_for(self, member_client, tenant):
        make_unit(tenant, "running")
        make_unit(tenant, "gone", phase=UnitPhase.TERMINATED)
        make_unit(tenant, "gone-too", phase=UnitPhase.TERMINATED)
        body = member_client.get(UNITS).content.decode()
        assert 'data-unit="running"' in body
        assert 'data-unit="gone"' not in body
        assert "2 Terminated units not shown" in body
        assert f'href="{UNITS}?phase=all"' in body
        everything = member_client.get(UNITS, {"phase": "all"}).content.decode()
        assert all(f'data-unit="{name}"' in everything for name in ("running", "gone", "gone-too"))
        assert "not shown" not in everything
        # The live rows keep the choice, or the first poll would hide them again.
        assert f'hx-get="{ROWS}?phase=all"' in everything
        only = member_client.get(UNITS, {"phase": "Terminated"}).content.decode()
        assert 'data-unit="gone"' in only
        assert 'data-unit="running"' not in only

    def test_reason_that_repeats_the_phase_is_not_shown(self, member_client, tenant):
        make_unit(tenant, "running", reason="Running")
        make_unit(tenant, "pending", phase=UnitPhase.PENDING, reason="NoMatchingDevices")
        body = member_client.get(UNITS).content.decode()
        running = body.split('data-unit="running"')[1].split("</tr>")[0]
        assert running.count("Running") == 2  # the phase badge's data-phase and its text
        pending = body.split('data-unit="pending"')[1].split("</tr>")[0]
        assert "NoMatchingDevices" in pending


class TestUnitDetail:
    def test_shows_contract_devices_objects_and_timeline(self, member_client, tenant):
        devices = [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-0"},
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-1"},
        ]
        unit = make_unit(
            tenant,
            "demo",
            node_name="node-1",
            dra={"claimName": "unit-demo-gpu", "allocated": True, "devices": devices},
        )
        body = member_client.get(detail(unit)).content.decode()
        for text in (
            "gpu.rtx3080.2x.10c.40g",
            "nvidia-rtx-3080",
            "<code>gpu-0</code>",
            "<code>gpu-1</code>",
            "on node <code>node-1</code>",
            "<code>unit-demo-gpu</code>",
            "<code>unit-demo</code>",
            "Accepted",
            "Ordered.",
        ):
            assert text in body

    @pytest.mark.parametrize(
        ("phase", "reason", "sentence"),
        [
            ("Pending", "NoMatchingDevices", "No node has 2 free nvidia-rtx-3080 GPUs"),
            ("Pending", "DeviceClassNotFound", "no device class named nvidia-rtx-3080"),
            ("Pending", "QuotaExceeded", "does not leave room for this unit"),
            ("Failed", "ImagePullFailed", "The image python:3.12 could not be pulled"),
            ("Failed", "ContainerCrashLoop", "keeps exiting right after it starts"),
            ("Failed", "NameInUse", "was not created by the control plane"),
            ("Failed", "ProvisioningFailed", "gave up after repeated attempts"),
            ("Pending", "SomethingNew", "Kubernetes reports SomethingNew."),
        ],
    )
    def test_explains_why_a_unit_waits_or_failed(
        self, member_client, tenant, phase, reason, sentence
    ):
        unit = make_unit(tenant, "demo", phase=phase, reason=reason, message="raw message")
        body = member_client.get(detail(unit)).content.decode()
        explanation = html.unescape(body.split('<p class="explanation">')[1].split("</p>")[0])
        assert sentence in explanation
        assert "raw message" in body

    def test_running_unit_needs_no_explanation(self, member_client, tenant):
        unit = make_unit(tenant, "demo", reason="Running")
        body = member_client.get(detail(unit)).content.decode()
        assert 'class="explanation"' not in body
        assert "Reason <code>Running</code>" not in body

    def test_kubectl_hint_is_for_ops_only(self, member_client, staff_client, tenant):
        unit = make_unit(tenant, "demo")
        assert "kubectl" not in member_client.get(detail(unit)).content.decode()
        assert f"kubectl -n {unit.namespace} get" in staff_client.get(detail(unit)).content.decode()

    def test_live_part_answers_204_when_unchanged_and_stops_after_terminated(
        self, member_client, tenant
    ):
        unit = make_unit(tenant, "demo", phase=UnitPhase.TERMINATING)
        since = member_client.get(detail(unit)).context["live"]["digest"]
        assert member_client.get(live(unit), {"since": since}).status_code == 204
        GPUUnit.objects.filter(pk=unit.pk).update(phase=UnitPhase.TERMINATED)
        response = member_client.get(live(unit), {"since": since})
        assert response.status_code == 286  # htmx: swap this, then stop polling
        assert b'data-phase="Terminated"' in response.content
        # A page opened after the end does not poll at all.
        page = member_client.get(detail(unit)).content.decode()
        assert 'id="unit-live"' in page
        assert f'hx-get="{live(unit)}"' not in page

    def test_terminated_unit_with_a_reused_name_is_still_its_own_page(self, member_client, tenant):
        old = make_unit(tenant, "demo", phase=UnitPhase.TERMINATED, image="old:1")
        new = make_unit(tenant, "demo", image="new:2")
        assert b"old:1" in member_client.get(detail(old)).content
        assert b"new:2" in member_client.get(detail(new)).content


class TestCreate:
    def test_form_offers_packages_with_availability(self, member_client, package):
        PackageAvailability.objects.create(
            package_id=package.id, placeable=3, free_devices=6, reason=""
        )
        body = member_client.get(NEW, {"package": package.id}).content.decode()
        assert f'value="{package.id}" id="id_package_0" checked' in body
        assert "3 can start now" in body
        assert 'name="operation_id" value="dash-' in body
        assert 'name="tenant"' not in body

    def test_order_records_unit_and_operation_then_shows_the_unit(
        self, member_client, tenant, package
    ):
        response = order(member_client, name="  Demo  ")
        unit = GPUUnit.objects.get()
        assert response.status_code == 302
        assert response["Location"] == detail(unit)
        assert (unit.tenant, unit.name, unit.package_id, unit.phase) == (
            tenant,
            "demo",
            package.id,
            UnitPhase.ACCEPTED,
        )
        operation = Operation.objects.get()
        assert operation.operation_id == unit.operation_id == "dash-" + "a" * 32
        assert (operation.kind, operation.status, operation.unit) == ("create", "pending", unit)
        page = member_client.get(response["Location"]).content.decode()
        assert "Unit demo ordered" in page
        assert "Names are lower-case: “Demo” is written demo." in page

    def test_an_interruptible_order_shows_its_badge_and_one_of_an_on_demand_package_is_refused(
        self, member_client, package
    ):
        refused = order(member_client, interruptible="on")
        assert refused.status_code == 200
        assert "This package is sold on demand only." in refused.content.decode()
        assert not GPUUnit.objects.exists()
        type(package).objects.filter(pk=package.pk).update(
            interruptible=True, interruptible_price="0.10"
        )
        packages_page = member_client.get(PACKAGES).content.decode()
        # Both prices where a customer chooses: the packages table and the order form's card.
        assert re.search(
            r"USD [0-9.]+</data> an hour on demand, <data[^>]*>USD 0.10</data> interruptible",
            packages_page,
        )
        form_page = member_client.get(f"{NEW}?package={package.id}").content.decode()
        assert re.search(
            r'<span class="price">USD [0-9.]+ an hour on demand, USD 0.10 interruptible</span>',
            form_page,
        )
        refused = order(member_client, auto_resume="on", operation_id="dash-" + "b" * 32)
        assert "Only an interruptible unit is preempted." in refused.content.decode()
        response = order(member_client, interruptible="on", auto_resume="on")
        unit = GPUUnit.objects.get()
        assert (unit.interruptible, unit.auto_resume) == (True, True)
        page = member_client.get(response["Location"]).content.decode()
        assert '<span class="badge">Interruptible</span>' in page
        assert re.search(r"<dt>Price</dt><dd><data[^>]*>USD 0.10</data> an hour", page)
        assert "Preemption" not in page
        unit.preemption = {
            "reason": "CapacityReclaimed",
            "noticeAt": "2026-12-04T06:40:51.000000Z",
            "preemptAt": "2026-12-04T06:42:51.000000Z",
        }
        unit.save(update_fields=["preemption"])
        page = member_client.get(response["Location"]).content.decode()
        assert "its devices are taken back at" in page
        assert "2026-12-04 06:42:51" in page
        # A countdown to it, which dashboard.js ticks on from the seconds the server wrote.
        soon = timezone.now() + timedelta(seconds=100)
        unit.preemption = {**unit.preemption, "preemptAt": soon.isoformat()}
        unit.save(update_fields=["preemption"])
        page = member_client.get(response["Location"]).content.decode()
        assert re.search(
            r'data-countdown-seconds="(99|100)">\(in 1 minute (39|40) seconds\)', page
        ), page

    def test_double_submit_replays_the_same_order(self, member_client, package):
        first = order(member_client)
        second = order(member_client)
        assert first["Location"] == second["Location"]
        assert GPUUnit.objects.count() == Operation.objects.count() == 1

    def test_missing_or_forged_operation_id_gets_a_fresh_one(self, member_client, package):
        order(member_client, operation_id="", name="a")
        order(member_client, operation_id="not-ours", name="b")
        ids = list(Operation.objects.values_list("operation_id", flat=True))
        assert len(set(ids)) == 2
        assert all(i.startswith("dash-") and len(i) == 37 for i in ids)

    @pytest.mark.parametrize(
        ("fields", "field", "message"),
        [
            ({"name": "Not_A_Label"}, "name", "DNS-1123 label"),
            ({"name": "x" * 55}, "name", "at most 54 characters"),
            ({"image": "UPPER CASE"}, "image", "is not a valid image reference"),
            ({"image": ""}, "image", "This field is required."),
            ({"package": "no-such-package"}, "package", "Select a valid choice."),
        ],
    )
    def test_invalid_input_is_shown_next_to_the_field(
        self, member_client, package, fields, field, message
    ):
        response = order(member_client, **fields)
        assert response.status_code == 200
        body = response.content.decode()
        error_block = body.split(f'id="id_{field}_error"')[1].split("</ul>")[0]
        assert message in error_block
        assert 'aria-invalid="true"' in body
        assert "The unit was not ordered" in body
        assert not GPUUnit.objects.exists()

    def test_name_conflict_is_shown_next_to_the_name(self, member_client, tenant, package):
        make_unit(tenant, "demo")
        body = order(member_client).content.decode()
        assert "A live unit named demo already exists" in body.split('id="id_name_error"')[1]
        assert GPUUnit.objects.count() == 1

    def test_the_form_orders_the_readmes_unit_with_command_env_port_and_auto_stop(
        self, member_client, package
    ):
        response = order(
            member_client,
            name="my-first-unit",
            command="python -m http.server",
            args="8080 --bind '0.0.0.0'",
            env="HF_HOME=/data/cache\nGREETING=hello world",
            ports="http:8080",
            stop_after="8h",
        )

        unit = GPUUnit.objects.get()
        assert response["Location"] == detail(unit)
        assert unit.template["command"] == ["python", "-m", "http.server"]
        assert unit.template["args"] == ["8080", "--bind", "0.0.0.0"]
        assert unit.template["env"] == [
            {"name": "HF_HOME", "value": "/data/cache"},
            {"name": "GREETING", "value": "hello world"},
        ]
        assert unit.template["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
        assert unit.stop_after == "8h"

    def test_name_and_image_come_first_and_the_rare_options_are_folded(self, member_client):
        body = member_client.get(NEW).content.decode()

        order_of = [body.index(f'name="{field}"') for field in ("name", "image", "command")]
        assert order_of == sorted(order_of)
        folded = body.split('<details class="more-options">')[1].split("</details>")[0]
        for field in ("stop_after", "interruptible", "reservation"):
            assert f'name="{field}"' in folded

    def test_every_problem_is_told_at_once_the_name_clash_with_the_others(
        self, member_client, tenant, package
    ):
        make_unit(tenant, "demo")

        body = order(
            member_client, image="UPPER CASE", env="NOT A VARIABLE", stop_after="forever"
        ).content.decode()

        assert "A live unit named demo already exists" in body.split('id="id_name_error"')[1]
        assert "not a valid image reference" in body.split('id="id_image_error"')[1]
        assert "is not NAME=value" in body.split('id="id_env_error"')[1]
        assert 'id="id_stop_after_error"' in body
        assert '<details class="more-options" open>' in body
        assert GPUUnit.objects.count() == 1

    def test_quota_exceeded_is_shown_next_to_the_package(self, member_client, tenant, package):
        tenant.quota_cpu = "15"
        tenant.save()
        make_unit(tenant, "first")
        body = order(member_client).content.decode()
        error = body.split('id="id_package_error"')[1].split("</ul>")[0]
        assert "Not enough quota left for this package: it needs 10 CPU" in error
        assert "10 of 15 are in use" in error
        assert GPUUnit.objects.count() == 1

    def test_a_package_larger_than_the_whole_quota_is_not_told_to_delete_units(
        self, member_client, tenant, package
    ):
        tenant.quota_cpu = "8"  # the package needs 10
        tenant.save()
        body = order(member_client).content.decode()
        error = body.split('id="id_package_error"')[1].split("</ul>")[0]
        assert "larger than your whole quota: it needs 10 CPU of the 8 you have" in error
        assert "Delete a unit" not in error
        assert not GPUUnit.objects.exists()

    def test_quota_error_marks_only_the_chosen_package_and_says_it_once(
        self, member_client, tenant, package
    ):
        from catalog.tests.factories import PackageFactory

        PackageFactory(id="gpu-rtx3080-1x-small", cpu="4", memory="16Gi", gpu=1, count=1)
        tenant.quota_cpu = "15"
        tenant.save()
        make_unit(tenant, "first")
        body = order(member_client).content.decode()
        message = "Not enough quota left for this package"
        assert body.count(message) == 1
        assert body.count("package-option has-error") == 1
        marked = body.split("package-option has-error")[1].split('<div class="package-option')[0]
        assert package.id in marked
        assert message in marked
        assert body.count('aria-invalid="true"') == 1
        # The summary links to the package the error is about (second, after the 1x one).
        assert f'<a href="#id_package_1">Package {package.id}</a>' in body

    def test_staff_order_for_the_tenant_they_choose(self, staff_client, other_tenant, package):
        page = staff_client.get(NEW).content.decode()
        assert f'<option value="{other_tenant.pk}">{other_tenant.slug}</option>' in page
        assert "This field is required." in order(staff_client).content.decode()
        response = order(staff_client, tenant=other_tenant.pk)
        unit = GPUUnit.objects.get()
        assert response["Location"] == detail(unit)
        assert unit.tenant == other_tenant


class TestDelete:
    def test_asks_for_confirmation_then_requests_deletion(self, member_client, tenant):
        unit = make_unit(tenant, "demo")
        page = member_client.get(delete(unit))
        assert page.status_code == 200
        assert b"Delete unit demo?" in page.content
        assert b'method="post"' in page.content
        unit.refresh_from_db()
        assert unit.phase == UnitPhase.RUNNING

        response = member_client.post(delete(unit))
        assert response["Location"] == detail(unit)
        unit.refresh_from_db()
        assert unit.phase == UnitPhase.TERMINATING
        assert Operation.objects.get().kind == "delete"
        assert b"Deletion of demo requested" in member_client.get(detail(unit)).content

    def test_deleting_a_terminated_unit_leaves_the_newer_unit_of_that_name(
        self, member_client, tenant
    ):
        old = make_unit(tenant, "demo", phase=UnitPhase.TERMINATED)
        new = make_unit(tenant, "demo")
        assert member_client.get(delete(old))["Location"] == detail(old)
        member_client.post(delete(old))
        new.refresh_from_db()
        assert new.phase == UnitPhase.RUNNING

    def test_staff_can_delete_any_tenants_unit(self, staff_client, other_tenant):
        unit = make_unit(other_tenant, "theirs")
        staff_client.post(delete(unit))
        unit.refresh_from_db()
        assert unit.phase == UnitPhase.TERMINATING


def seed_inventory(*, synced_ago: timedelta = timedelta(seconds=5), error: str = "") -> None:
    now = timezone.now()
    Node.objects.create(name="node-a", ready=True)
    Node.objects.create(name="node-b", ready=False)
    for index in range(4):
        Device.objects.create(
            driver="gpu.nvidia.com",
            pool="node-a" if index < 3 else "node-b",
            name=f"gpu-{index}",
            node_name="node-a" if index < 3 else "node-b",
            pool_complete=True,
            # Every device also matches the driver's catch-all class, as on a real cluster.
            device_classes=["nvidia-rtx-3080" if index < 2 else "h100", "gpu.nvidia.com"],
            content_hash="x",
            allocated=index == 0,
        )
    for minutes, allocated in ((3, 0), (2, 2), (1, 1)):
        SyncRun.objects.create(
            started_at=now - timedelta(minutes=minutes),
            finished_at=now - timedelta(minutes=minutes),
            allocated_devices=allocated,
            total_devices=4,
        )
    SyncRun.objects.create(started_at=now, finished_at=now, error=error) if error else None
    InventorySnapshot.objects.create(pk=1, as_of=now - synced_ago, document="{}")


LIVE_PAGES = [(OVERVIEW, "/live/"), (PACKAGES, "/packages/live/")]


class TestLivePages:
    """The overview and the packages page refresh themselves like the unit pages."""

    @pytest.mark.parametrize(
        ("page", "live"), [(OVERVIEW, "/live/"), (PACKAGES, "/packages/live/")]
    )
    def test_page_polls_its_live_body(self, member_client, page, live):
        body = member_client.get(page).content.decode()
        assert f'hx-get="{live}"' in body
        assert 'hx-trigger="every 3s' in body
        assert 'aria-live="polite"' in body

    @pytest.mark.parametrize(
        ("page", "live"), [(OVERVIEW, "/live/"), (PACKAGES, "/packages/live/")]
    )
    def test_live_body_answers_204_until_availability_moves(
        self, member_client, package, page, live, monkeypatch
    ):
        # One reading of the clock: the overview's body names the month's start, which moves
        # when a UTC month ends between the page and its poll.
        now = timezone.now()
        monkeypatch.setattr(timezone, "now", lambda: now)
        seed_inventory(synced_ago=timedelta(hours=2))  # an age that reads the same all test
        row = PackageAvailability.objects.create(
            package_id=package.id, placeable=1, free_devices=2, reason=""
        )
        since = member_client.get(page).context["live"]["digest"]
        assert member_client.get(live, {"since": since}).status_code == 204
        row.placeable, row.free_devices = 0, 0
        row.reason = "no node has 2 free devices"
        row.save()
        changed = member_client.get(live, {"since": since})
        assert changed.status_code == 200
        body = changed.content.decode()
        assert "<html" not in body
        assert "no node has 2 free devices" in body
        assert 'hx-swap-oob="innerHTML"' in body
        assert changed.context["live"]["digest"] != since

    @pytest.mark.parametrize(("page", "live"), LIVE_PAGES)
    def test_live_body_answers_204_while_only_the_sync_age_moves(
        self, member_client, package, page, live, monkeypatch
    ):
        # Within the last hour that has ended, so that the 35 s below stay in one UTC month
        # (the overview's body names the month's start).
        start = periods.floor_hour(timezone.now()) - timedelta(minutes=30)
        monkeypatch.setattr(timezone, "now", lambda: start)  # the age is exact, not >= 5 s
        seed_inventory(synced_ago=timedelta(seconds=5))
        response = member_client.get(page)
        assert 'data-age-seconds="5">5 seconds ago<' in response.content.decode()
        since = response.context["live"]["digest"]
        # Later, no sync since, still fresh: the browser ticks the age on by itself.
        monkeypatch.setattr(timezone, "now", lambda: start + timedelta(seconds=35))
        assert member_client.get(live, {"since": since}).status_code == 204
        # Turning stale is a figure that moves: the body comes again, with its age.
        monkeypatch.setattr(timezone, "now", lambda: start + timedelta(minutes=10))
        stale = member_client.get(live, {"since": since})
        assert stale.status_code == 200
        assert "10 minutes ago<" in stale.content.decode()
        assert "Stale" in stale.content.decode()


class TestOverview:
    def test_shows_devices_phases_packages_and_chart(
        self, staff_client, tenant, package, monkeypatch
    ):
        now = timezone.now()
        monkeypatch.setattr(timezone, "now", lambda: now)  # the sync was exactly 5 s ago
        seed_inventory()
        PackageAvailability.objects.create(
            package_id=package.id, placeable=1, free_devices=1, reason=""
        )
        make_unit(tenant, "a")
        make_unit(tenant, "b", phase=UnitPhase.PENDING)
        response = staff_client.get(OVERVIEW)
        context = response.context
        classes = context["device_classes"]
        rows = {row.name: (row.total, row.allocated, row.free) for row in classes.model_classes}
        assert rows == {"h100": (2, 0, 2), "nvidia-rtx-3080": (2, 1, 1)}
        nodes = {row.name: (row.total, row.allocated, row.ready) for row in context["nodes"]}
        assert nodes == {"node-a": (3, 1, True), "node-b": (1, 0, False)}
        assert dict(context["phases"])["Running"] == 1
        assert dict(context["phases"])["Pending"] == 1
        body = response.content.decode()
        assert "<svg" in body
        assert "3 inventory syncs" in body
        assert "Fresh" in body
        assert "5 seconds ago" in body

    def test_catch_all_class_is_the_total_not_a_model_row(self, staff_client):
        seed_inventory()
        response = staff_client.get(OVERVIEW)
        classes = response.context["device_classes"]
        assert classes.catch_all == ["gpu.nvidia.com"]
        assert (classes.all_devices.total, classes.all_devices.allocated) == (4, 1)
        # The model rows add up to the devices there are, not twice as many.
        assert sum(row.total for row in classes.model_classes) == 4
        body = response.content.decode()
        model_rows = body.split('class="device-classes"')[1].split("<tfoot>")[0]
        assert "gpu.nvidia.com" not in model_rows
        total = body.split("<tfoot>")[1].split("</tfoot>")[0]
        assert "All GPU devices" in total
        assert '<td class="num">4</td>' in total
        assert "<code>gpu.nvidia.com</code> matches every device" in body

    def test_cluster_figures_are_for_ops_only(self, member_client, tenant, other_tenant):
        seed_inventory()
        make_unit(other_tenant, "theirs")
        response = member_client.get(OVERVIEW)
        assert response.context["nodes"] is None
        assert response.context["device_classes"] is None
        body = response.content.decode()
        for cluster_figure in (
            "GPU devices by node",
            "GPU devices by device class",
            "Allocated devices over time",
        ):
            assert cluster_figure not in body

    def test_customer_sees_its_own_usage(self, member_client, tenant, other_tenant):
        seed_inventory()
        make_unit(tenant, "mine", dra={"allocated": True})
        make_unit(tenant, "waiting", phase=UnitPhase.PENDING)
        make_unit(tenant, "gone", phase=UnitPhase.TERMINATED)
        for index in range(3):
            make_unit(other_tenant, f"theirs-{index}", dra={"allocated": True})
        usage = member_client.get(OVERVIEW).context["usage"]
        quota = {line.name: (line.used, line.hard) for line in usage.quota}
        assert quota == {"CPU": ("20", "160"), "Memory": ("80Gi", "256Gi"), "Units": ("2", "64")}
        classes = [
            (r.device_class, r.units, r.gpus_ordered, r.gpus_allocated) for r in usage.classes
        ]
        assert classes == [("nvidia-rtx-3080", 2, 4, 2)]

    def test_members_of_an_operator_tenant_see_nodes(self):
        seed_inventory()
        client = client_for(make_user(TenantFactory(is_operator=True)))
        assert b"GPU devices by node" in client.get(OVERVIEW).content

    def test_old_sync_is_shown_as_stale(self, member_client):
        seed_inventory(synced_ago=timedelta(minutes=10))
        body = member_client.get(OVERVIEW).content.decode()
        assert "Stale" in body
        assert "10 minutes ago" in body

    def test_failed_sync_is_shown_as_stale_with_its_error(self, member_client):
        seed_inventory(error="cluster unreachable")
        body = member_client.get(OVERVIEW).content.decode()
        assert "Stale" in body
        assert "The last sync failed: cluster unreachable" in body

    def test_no_sync_yet_says_so(self, member_client):
        assert b"No inventory sync has finished yet" in member_client.get(OVERVIEW).content


class TestPackages:
    def test_tenant_sees_active_packages_with_its_availability(
        self, member_client, tenant, package
    ):
        from catalog.tests.factories import PackageFactory

        PackageFactory(id="retired", active=False)
        PackageAvailability.objects.create(
            package_id=package.id, placeable=5, free_devices=10, reason=""
        )
        tenant.quota_claims = 2
        tenant.save()
        body = member_client.get(PACKAGES).content.decode()
        assert package.id in body
        assert "retired" not in body
        assert "/admin/" not in body
        # The cluster could place 5, the tenant's quota admits 2 more units.
        assert '<strong class="placeable">2</strong>' in body

    def test_a_packages_gpu_is_named_as_the_clusters_publish_it(self, member_client, package):
        """Issue 43, item 10: a person reads "NVIDIA GeForce RTX 3080", not a class name."""
        Device.objects.create(
            driver="gpu.nvidia.com",
            pool="node-a",
            name="gpu-0",
            node_name="node-a",
            pool_complete=True,
            product="NVIDIA GeForce RTX 3080",
            device_classes=["nvidia-rtx-3080", "gpu.nvidia.com"],
            content_hash="x",
        )

        table = member_client.get(PACKAGES).content.decode()
        card = member_client.get(NEW).content.decode()

        assert "2\N{MULTIPLICATION SIGN} NVIDIA GeForce RTX 3080" in table
        assert '<span class="sizes device-class">' in table
        assert "<code>nvidia-rtx-3080</code>" in table
        assert "2\N{MULTIPLICATION SIGN} NVIDIA GeForce RTX 3080, 10 CPU, 40Gi memory" in card

    def test_staff_see_every_package_with_admin_links(self, staff_client, package):
        from catalog.tests.factories import PackageFactory

        PackageFactory(id="retired", active=False)
        body = staff_client.get(PACKAGES).content.decode()
        assert f"/admin/catalog/package/{package.pk}/change/" in body
        assert "/admin/catalog/package/retired/change/" in body
        assert "inactive: not offered to customers" in body


def count_queries(client: Client, path: str) -> int:
    with recording() as log:
        response = client.get(path)
    assert response.status_code == 200, response
    return len(log.statements)


class TestQueryCounts:
    """Statements per page must not grow with the number of units shown."""

    @pytest.mark.parametrize("path", [UNITS, ROWS, OVERVIEW, PACKAGES])
    @pytest.mark.parametrize("staff", [False, True])
    def test_flat_in_the_number_of_units(
        self, tenant, other_tenant, package, path, staff, monkeypatch
    ):
        # One reading of the clock for both counts: the overview reads one statement fewer in
        # a UTC day's first minute (its costs, counted to the minute, reach no further).
        now = timezone.now()
        monkeypatch.setattr(timezone, "now", lambda: now)
        seed_inventory()
        user = make_user(tenant, staff=staff)
        client = client_for(user)
        make_unit(tenant, "unit-0")
        make_unit(other_tenant, "other-0")
        one = count_queries(client, path)
        for index in range(1, 30):
            make_unit(tenant, f"unit-{index}", phase=UnitPhase.PENDING, reason="NoMatchingDevices")
            make_unit(other_tenant, f"other-{index}")
        assert count_queries(client, path) == one

    def test_unit_detail_flat_in_timeline_length(self, member_client, tenant):
        unit = make_unit(tenant, "demo")
        one = count_queries(member_client, detail(unit))
        from runtime.models import UnitEvent

        UnitEvent.objects.bulk_create(
            [UnitEvent(unit=unit, reason=f"R{i}", message="m") for i in range(30)]
        )
        assert count_queries(member_client, detail(unit)) == one


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "now"),
        (-5, "now"),
        (45, "in 45 seconds"),
        (60, "in 1 minute"),
        (100, "in 1 minute 40 seconds"),
        (125, "in 2 minutes 5 seconds"),
    ],
)
def test_a_preemption_countdown_reads_in_words(seconds, text):
    assert countdown(seconds) == text
