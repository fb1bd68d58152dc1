"""Stop, start, restart and edit in the dashboard: each button enabled by the runtime's own
rules (actions.refusal) or disabled with the reason in words, each POST recording an Operation
of its kind (a refused one recording nothing), the live part following Stopping and Stopped,
the edit form through update_unit with the etag it was shown with, and the units list with
Stopped units and when auto-stop stops them."""

from __future__ import annotations

import html
import re
import shlex
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from dashboard.tests.conftest import make_unit
from dashboard.tests.test_views import UNITS, detail, live
from runtime.models import GPUUnit, Operation, OperationKind, OperationStatus, UnitPhase
from tenancy.models import Tenant

pytestmark = pytest.mark.django_db

OPERATION_ID = "dash-" + "b" * 32
TEMPLATE = {
    "command": ["python", "-c", "print('hi there')"],
    "args": ["--verbose"],
    "env": [{"name": "HF_HOME", "value": "/data/cache"}, {"name": "MODE", "value": "a=b c"}],
    "ports": [
        {"name": "http", "port": 8080, "protocol": "TCP"},
        {"name": "metrics", "port": 9100, "protocol": "UDP"},
    ],
}


def unit_in(tenant: Tenant, phase: str = "Running", name: str = "demo", **fields) -> GPUUnit:
    """A unit whose objects exist in the cluster (as far as the runtime's rules look), in
    `phase`; the cluster itself is not needed while nothing is carried out."""
    defaults = {
        "unit_k8s_uid": "00000000-0000-0000-0000-000000000001",
        "observed_generation": 1,
    }
    if phase in (UnitPhase.STOPPED, UnitPhase.STOPPING):
        defaults |= {"run_policy": "Stopped", "compute_charged": phase == UnitPhase.STOPPING}
    return make_unit(tenant, name, phase=phase, **(defaults | fields))


def action_url(unit: GPUUnit, action: str) -> str:
    return f"/units/{unit.uid}/{action}/"


def edit_url(unit: GPUUnit) -> str:
    return f"/units/{unit.uid}/edit/"


def status_card(body: str) -> str:
    return body.split('aria-labelledby="status-heading"')[1].split("</section>")[0]


def refusal_of(card: str, label: str) -> str | None:
    """The words next to the disabled button `label`, None when it is enabled."""
    button = re.search(
        rf'<button type="button" class="button[^"]*" aria-disabled="true" '
        rf'aria-describedby="([^"]+)">'
        rf"{label}</button>",
        card,
    )
    if button is None:
        return None
    reason = re.search(rf'<li id="{button.group(1)}">(.*?)</li>', card, re.S)
    assert reason is not None, f"{label}'s reason is not on the page"
    return html.unescape(re.sub(r"<[^>]+>", "", reason.group(1)))


def enabled(card: str, unit: GPUUnit) -> set[str]:
    """The lifecycle actions the card offers as working controls."""
    offered = set()
    if f'action="{action_url(unit, "start")}"' in card:
        offered.add("Start")
    for label, action in (("Stop", "stop"), ("Restart", "restart")):
        if f'href="{action_url(unit, action)}"' in card:
            offered.add(label)
    if f'href="{edit_url(unit)}"' in card:
        offered.add("Edit")
    return offered


def messages_of(client: Client, unit: GPUUnit) -> str:
    body = client.get(detail(unit)).content.decode()
    if 'class="messages"' not in body:
        return ""
    return html.unescape(body.split('class="messages"')[1].split("</div>")[0])


class TestButtons:
    @pytest.mark.parametrize(
        ("phase", "offered"),
        [
            ("Running", {"Stop", "Restart", "Edit"}),
            ("Pending", {"Stop", "Restart", "Edit"}),
            ("Failed", {"Stop", "Restart", "Edit"}),
            ("Provisioning", {"Stop", "Restart", "Edit"}),
            ("Stopped", {"Start", "Edit"}),
            ("Stopping", set()),
            ("Accepted", set()),
        ],
    )
    def test_enabled_by_phase_and_disabled_ones_say_why(
        self, member_client, tenant, phase, offered
    ):
        unit = unit_in(tenant, phase)
        card = status_card(member_client.get(detail(unit)).content.decode())
        assert enabled(card, unit) == offered
        for label in {"Start", "Stop", "Restart", "Edit"} - offered:
            reason = refusal_of(card, label)
            assert reason is not None, f"{label} is neither enabled nor disabled"
            assert label in reason.split(":")[0]
            assert f"it is {phase}." in reason
        for label in offered:
            assert refusal_of(card, label) is None

    def test_an_open_operation_disables_them_all_with_one_reason_naming_it(
        self, member_client, tenant
    ):
        unit = unit_in(tenant)
        Operation.objects.create(
            tenant=tenant, operation_id="op-restart-1", kind="restart", request_hash="x", unit=unit
        )
        card = status_card(member_client.get(detail(unit)).content.decode())
        assert enabled(card, unit) == set()
        reasons = {refusal_of(card, label) for label in ("Start", "Stop", "Restart", "Edit")}
        assert reasons == {
            "Start, Stop, Restart, Edit: gpu unit demo has an open restart operation "
            "(op-restart-1); retry once it has finished."
        }
        assert card.count("<li id=") == 1

    def test_a_unit_without_cluster_objects_offers_no_action(self, member_client, tenant):
        unit = unit_in(tenant, unit_k8s_uid="")
        card = status_card(member_client.get(detail(unit)).content.decode())
        assert enabled(card, unit) == set()
        assert "it has no objects in the cluster" in (refusal_of(card, "Stop") or "")

    @pytest.mark.parametrize("phase", ["Terminating", "Terminated"])
    def test_an_ending_unit_shows_no_buttons(self, member_client, tenant, phase):
        unit = unit_in(tenant, phase)
        card = status_card(member_client.get(detail(unit)).content.decode())
        assert 'class="unit-actions"' not in card
        assert "action-refusals" not in card

    def test_reasons_are_visible_text_not_tooltips(self, member_client, tenant):
        unit = unit_in(tenant)
        card = status_card(member_client.get(detail(unit)).content.decode())
        assert "title=" not in card
        assert '<ul class="action-refusals">' in card


class TestActions:
    def test_stop_asks_first_then_records_a_stop_and_names_it(self, member_client, tenant):
        unit = unit_in(tenant)
        page = member_client.get(action_url(unit, "stop"))
        assert page.status_code == 200
        body = page.content.decode()
        assert "Stop unit demo?" in body
        assert "2 GPUs go back to the pool" in body
        operation_id = re.search(r'name="operation_id" value="(dash-[0-9a-f]{32})"', body)[1]
        assert not Operation.objects.exists()

        response = member_client.post(action_url(unit, "stop"), {"operation_id": operation_id})
        assert response["Location"] == detail(unit)
        operation = Operation.objects.get()
        assert (operation.kind, operation.operation_id) == ("stop", operation_id)
        unit.refresh_from_db()
        assert (unit.phase, unit.reason, unit.run_policy) == (
            "Stopping",
            "StopRequested",
            "Stopped",
        )
        assert f"Stop of demo requested (operation {operation_id})" in messages_of(
            member_client, unit
        )

    def test_a_double_submit_is_one_stop(self, member_client, tenant):
        unit = unit_in(tenant)
        member_client.post(action_url(unit, "stop"), {"operation_id": OPERATION_ID})
        member_client.post(action_url(unit, "stop"), {"operation_id": OPERATION_ID})
        assert Operation.objects.count() == 1
        assert "Stop of demo was already requested" in messages_of(member_client, unit)

    def test_start_needs_no_confirmation_and_records_a_start(self, member_client, tenant):
        unit = unit_in(tenant, "Stopped")
        assert member_client.get(action_url(unit, "start"))["Location"] == detail(unit)
        response = member_client.post(action_url(unit, "start"), {"operation_id": OPERATION_ID})
        assert response["Location"] == detail(unit)
        assert Operation.objects.get().kind == "start"
        unit.refresh_from_db()
        assert (unit.phase, unit.reason, unit.generation) == ("Provisioning", "StartRequested", 2)

    def test_restart_asks_first_then_records_a_restart(self, member_client, tenant):
        unit = unit_in(tenant, "Failed", reason="DeviceUnhealthy")
        assert b"Restart unit demo?" in member_client.get(action_url(unit, "restart")).content
        member_client.post(action_url(unit, "restart"), {"operation_id": OPERATION_ID})
        assert Operation.objects.get().kind == "restart"
        unit.refresh_from_db()
        assert (unit.phase, unit.reason) == ("Provisioning", "Restarting")

    @pytest.mark.parametrize(
        ("phase", "action", "words"),
        [
            ("Running", "start", "cannot start gpu unit demo: it is Running."),
            ("Stopped", "stop", "cannot stop gpu unit demo: it is Stopped."),
            ("Stopped", "restart", "cannot restart gpu unit demo: it is Stopped."),
        ],
    )
    def test_a_refused_action_shows_the_reason_and_records_nothing(
        self, member_client, tenant, phase, action, words
    ):
        unit = unit_in(tenant, phase)
        response = member_client.post(action_url(unit, action), {"operation_id": OPERATION_ID})
        assert response["Location"] == detail(unit)
        assert not Operation.objects.exists()
        assert words in messages_of(member_client, unit)
        unit.refresh_from_db()
        assert unit.phase == phase

    def test_the_confirmation_page_of_a_refused_action_sends_back_with_the_reason(
        self, member_client, tenant
    ):
        unit = unit_in(tenant, "Stopped")
        assert member_client.get(action_url(unit, "stop"))["Location"] == detail(unit)
        assert "Stop is not possible now: cannot stop gpu unit demo: it is Stopped." in (
            messages_of(member_client, unit)
        )

    def test_a_start_over_the_quota_says_how_much_and_records_nothing(self, member_client, tenant):
        unit = unit_in(tenant, "Stopped")
        Tenant.objects.filter(pk=tenant.pk).update(quota_cpu="4")
        member_client.post(action_url(unit, "start"), {"operation_id": OPERATION_ID})
        assert not Operation.objects.exists()
        said = messages_of(member_client, unit)
        assert "demo was not started: it needs 10 CPU" in said
        assert "of the 4 of your quota are in use" in said

    def test_a_terminated_unit_is_not_acted_on_nor_the_newer_unit_of_its_name(
        self, member_client, tenant
    ):
        old = unit_in(tenant, "Terminated")
        new = unit_in(tenant)
        member_client.post(action_url(old, "stop"), {"operation_id": OPERATION_ID})
        assert not Operation.objects.exists()
        new.refresh_from_db()
        assert new.phase == "Running"

    def test_staff_stop_any_tenants_unit(self, staff_client, other_tenant):
        unit = unit_in(other_tenant, name="theirs")
        staff_client.post(action_url(unit, "stop"), {"operation_id": OPERATION_ID})
        assert Operation.objects.get().tenant == other_tenant

    def test_another_tenants_unit_is_not_found(self, member_client, other_tenant):
        unit = unit_in(other_tenant, name="theirs")
        response = member_client.post(action_url(unit, "stop"), {"operation_id": OPERATION_ID})
        assert response.status_code == 404
        assert not Operation.objects.exists()


class TestLivePart:
    def test_follows_stopping_and_stopped_with_the_buttons(self, member_client, tenant):
        unit = unit_in(tenant)
        member_client.post(action_url(unit, "stop"), {"operation_id": OPERATION_ID})
        body = member_client.get(live(unit)).content.decode()
        assert 'data-phase="Stopping"' in body
        assert "demo is Stopping." in body
        assert enabled(status_card(body), unit) == set()
        assert "has an open stop operation (" in (refusal_of(status_card(body), "Start") or "")

        GPUUnit.objects.filter(pk=unit.pk).update(phase="Stopped", reason="Stopped")
        Operation.objects.update(status=OperationStatus.SUCCEEDED)
        body = member_client.get(live(unit)).content.decode()
        assert 'data-phase="Stopped"' in body
        assert 'class="phase phase-stopped"' in body
        assert enabled(status_card(body), unit) == {"Start", "Edit"}

    def test_answers_204_while_nothing_but_the_forms_nonces_would_change(
        self, member_client, tenant
    ):
        unit = unit_in(tenant, "Stopped")
        first = member_client.get(detail(unit))
        assert 'name="csrfmiddlewaretoken"' in status_card(first.content.decode())
        since = first.context["live"]["digest"]
        assert member_client.get(live(unit), {"since": since}).status_code == 204
        GPUUnit.objects.filter(pk=unit.pk).update(phase="Provisioning", reason="StartRequested")
        assert member_client.get(live(unit), {"since": since}).status_code == 200

    def test_shows_the_generation_and_a_rollout_until_the_cluster_catches_up(
        self, member_client, tenant
    ):
        unit = unit_in(tenant, generation=3, observed_generation=2)
        card = status_card(member_client.get(live(unit)).content.decode())
        assert "3 <span" in card
        assert "the change is being rolled out (the cluster is at generation 2)" in card
        GPUUnit.objects.filter(pk=unit.pk).update(observed_generation=3)
        card = status_card(member_client.get(live(unit)).content.decode())
        assert "being rolled out" not in card

    def test_a_unit_being_created_is_not_rolling_anything_out(self, member_client, tenant):
        unit = unit_in(tenant, "Provisioning", observed_generation=0)
        assert "being rolled out" not in member_client.get(detail(unit)).content.decode()

    def test_shows_stop_after_and_when_the_unit_stops(self, member_client, tenant):
        stops = timezone.now().replace(microsecond=0) + timedelta(hours=3)
        unit = unit_in(tenant, stop_after="8h", stops_at=stops)
        card = status_card(member_client.get(detail(unit)).content.decode())
        assert "after <code>8h</code>: stops at" in card
        assert f'<time datetime="{stops.isoformat()}">{stops:%Y-%m-%d %H:%M:%S}</time> UTC' in card
        stopped = unit_in(tenant, "Stopped", name="resting", stop_after="8h")
        card = status_card(member_client.get(detail(stopped)).content.decode())
        assert "after <code>8h</code>, counted from its next start" in card
        plain = unit_in(tenant, name="plain")
        card = status_card(member_client.get(detail(plain)).content.decode())
        assert "none: it runs until stopped" in card

    def test_explains_a_stopped_unit_and_an_auto_stop(self, member_client, tenant):
        unit = unit_in(tenant, "Stopping", reason="AutoStop", stop_after="2h")
        body = html.unescape(member_client.get(detail(unit)).content.decode())
        assert "Auto-stop: the unit has run for its stopAfter of 2h" in body
        GPUUnit.objects.filter(pk=unit.pk).update(phase="Stopped", reason="Stopped")
        body = html.unescape(member_client.get(detail(unit)).content.decode())
        assert "The unit is stopped: it has no pod and holds no GPUs" in body
        assert "the unit is stopped and its devices are back in the pool" in body


def edit(client: Client, unit: GPUUnit, **fields) -> object:
    """Submit the edit form as shown for `unit` now, with `fields` changed."""
    form = client.get(edit_url(unit)).context["form"]
    data = {name: form.initial.get(name, "") for name in form.fields} | fields
    return client.post(edit_url(unit), data)


def field_errors(body: str, field: str) -> str:
    return html.unescape(body.split(f'id="id_{field}_error"')[1].split("</ul>")[0])


class TestEditForm:
    def test_is_filled_in_with_the_units_current_settings(self, member_client, tenant):
        unit = unit_in(
            tenant,
            image="ghcr.io/org/app:1.0",
            template=TEMPLATE,
            access={"primaryPort": "http", "scheme": "tcp"},
            stop_after="8h",
        )
        response = member_client.get(edit_url(unit))
        body = html.unescape(response.content.decode())
        assert 'value="ghcr.io/org/app:1.0"' in body
        assert f'value="{shlex.join(TEMPLATE["command"])}"' in body
        assert ">\nHF_HOME=/data/cache\nMODE=a=b c</textarea>" in body
        assert ">\nhttp:8080\nmetrics:9100/UDP</textarea>" in body
        assert '<option value="tcp" selected>' in body
        assert 'name="stop_after" value="8h"' in body
        assert f'name="etag" value="{unit.etag}"' in body
        assert re.search(r'name="operation_id" value="dash-[0-9a-f]{32}"', body)
        assert "The image's arguments stay as they are: --verbose." in body

    def test_a_valid_edit_records_an_update_and_the_next_generation(self, member_client, tenant):
        unit = unit_in(tenant, template=TEMPLATE, access={"primaryPort": "http", "scheme": "http"})
        response = edit(
            member_client,
            unit,
            image="python:3.13",
            command="python -m http.server '8080'",
            env="HF_HOME=/data/cache\nTOKEN=a b=c\n",
        )
        assert response.status_code == 302, response.context["form"].errors
        assert response["Location"] == detail(unit)
        operation = Operation.objects.get()
        assert operation.kind == OperationKind.UPDATE
        unit.refresh_from_db()
        assert unit.generation == 2
        assert unit.image == "python:3.13"
        assert unit.template["command"] == ["python", "-m", "http.server", "8080"]
        assert unit.template["args"] == ["--verbose"]
        assert unit.template["env"][1] == {"name": "TOKEN", "value": "a b=c"}
        assert unit.template["ports"] == TEMPLATE["ports"]
        assert (unit.phase, unit.reason) == ("Provisioning", "Updating")
        body = member_client.get(detail(unit)).content.decode()
        assert f"Update of demo to generation 2 requested (operation {operation.operation_id})" in (
            body
        )
        assert "the change is being rolled out (the cluster is at generation 1)" in body

    def test_ports_and_stop_after_are_changed_as_the_api_would(self, member_client, tenant):
        unit = unit_in(tenant)
        edit(
            member_client, unit, ports="web:8000\nstats:9100/udp", scheme="https", stop_after="90m"
        )
        unit.refresh_from_db()
        assert unit.template["ports"] == [
            {"name": "web", "port": 8000, "protocol": "TCP"},
            {"name": "stats", "port": 9100, "protocol": "UDP"},
        ]
        assert unit.access == {"primaryPort": "web", "scheme": "https"}
        assert unit.stop_after == "1h30m"

    def test_ssh_and_mounts_the_form_leaves_alone_stay_as_they_are(self, member_client, tenant):
        # The only key it let in was removed since: its list is empty, which an order refuses.
        ssh = {"enabled": True, "keys": []}
        mounts = [{"name": "models", "mountPath": "/models", "readOnly": True}]
        unit = unit_in(tenant, ssh=ssh, storage_mounts=mounts)
        response = edit(member_client, unit, image="python:3.13")
        assert response.status_code == 302, response.context["form"].errors
        unit.refresh_from_db()
        assert (unit.image, unit.ssh, unit.storage_mounts) == ("python:3.13", ssh, mounts)

    def test_a_stale_etag_says_the_unit_changed_and_records_nothing(self, member_client, tenant):
        unit = unit_in(tenant)
        form = member_client.get(edit_url(unit)).context["form"]
        data = {name: form.initial.get(name, "") for name in form.fields} | {"image": "mine:1"}
        # Someone else changes the unit meanwhile.
        GPUUnit.objects.filter(pk=unit.pk).update(generation=2, image="theirs:2")
        response = member_client.post(edit_url(unit), data)
        assert response.status_code == 200
        body = html.unescape(response.content.decode())
        assert "The unit changed since you opened this form" in body
        assert "Nothing was saved" in body
        assert not Operation.objects.exists()
        unit.refresh_from_db()
        assert (unit.generation, unit.image) == (2, "theirs:2")
        # The form starts again from the unit as it is now.
        assert 'value="theirs:2"' in body
        assert f'name="etag" value="{unit.etag}"' in body

    def test_an_invalid_image_is_shown_next_to_the_image(self, member_client, tenant):
        unit = unit_in(tenant)
        response = edit(member_client, unit, image="Not An Image!")
        body = response.content.decode()
        assert "is not a valid image reference" in field_errors(body, "image")
        assert '<a href="#id_image">Image</a>' in body
        assert "The change was not saved" in body
        assert not Operation.objects.exists()
        unit.refresh_from_db()
        assert unit.generation == 1

    @pytest.mark.parametrize(
        ("field", "value", "words"),
        [
            ("env", "JUST_A_NAME", "“JUST_A_NAME” is not NAME=value"),
            ("env", "OK=1\n1BAD=x", "1BAD=…: not a valid environment variable name."),
            ("env", "GPU_COUNT=9", "GPU_COUNT=…: GPU_COUNT is set by the control plane."),
            ("ports", "http:99999", "http:99999: port must be an integer from 1 to 65535."),
            ("ports", "http 80", "“http 80” is not a port"),
            ("command", "python -c 'unclosed", "The command cannot be split into words"),
            ("stop_after", "soon", '"soon" is not a duration'),
        ],
    )
    def test_problems_are_shown_next_to_their_field(
        self, member_client, tenant, field, value, words
    ):
        unit = unit_in(tenant)
        body = edit(member_client, unit, **{field: value}).content.decode()
        assert words in field_errors(body, field)
        assert not Operation.objects.exists()

    def test_every_problem_is_shown_at_once(self, member_client, tenant):
        Tenant.objects.filter(pk=tenant.pk).update(max_stop_after="8h")
        unit = unit_in(tenant)
        body = edit(
            member_client, unit, image="Not An Image!", env="JUST_A_NAME", stop_after="9h"
        ).content.decode()
        assert "is not a valid image reference" in field_errors(body, "image")
        assert "“JUST_A_NAME” is not NAME=value" in field_errors(body, "env")
        assert "exceeds the maximum of 8h" in field_errors(body, "stop_after")
        for target in ("id_image", "id_env", "id_stop_after"):
            assert f'<a href="#{target}">' in body
        assert not Operation.objects.exists()

    def test_a_stop_after_over_the_maximum_names_it(self, member_client, tenant):
        Tenant.objects.filter(pk=tenant.pk).update(max_stop_after="8h")
        unit = unit_in(tenant)
        page = member_client.get(edit_url(unit)).content.decode()
        assert f"at most 8h, the maximum set for tenant {tenant.slug}" in page
        body = edit(member_client, unit, stop_after="9h").content.decode()
        assert f"exceeds the maximum of 8h set for tenant {tenant.slug}" in field_errors(
            body, "stop_after"
        )
        assert not Operation.objects.exists()

    def test_no_change_saves_nothing_new(self, member_client, tenant):
        unit = unit_in(tenant, template=TEMPLATE, access={"primaryPort": "http", "scheme": "http"})
        response = edit(member_client, unit)
        assert response["Location"] == detail(unit)
        unit.refresh_from_db()
        assert unit.generation == 1
        assert Operation.objects.get().status == OperationStatus.SUCCEEDED
        assert "Nothing to save" in messages_of(member_client, unit)

    def test_a_double_submit_is_one_update(self, member_client, tenant):
        unit = unit_in(tenant)
        form = member_client.get(edit_url(unit)).context["form"]
        data = {name: form.initial.get(name, "") for name in form.fields} | {"image": "new:1"}
        member_client.post(edit_url(unit), data)
        second = member_client.post(edit_url(unit), data)
        assert second["Location"] == detail(unit)
        assert Operation.objects.count() == 1
        unit.refresh_from_db()
        assert unit.generation == 2
        assert "already saved" in messages_of(member_client, unit)

    def test_an_edit_while_another_operation_is_open_is_refused_with_its_reason(
        self, member_client, tenant
    ):
        unit = unit_in(tenant)
        Operation.objects.create(
            tenant=tenant, operation_id="op-stop-1", kind="stop", request_hash="x", unit=unit
        )
        page = html.unescape(member_client.get(edit_url(unit)).content.decode())
        assert "A change cannot be saved right now: gpu unit demo has an open stop operation" in (
            page
        )
        body = html.unescape(edit(member_client, unit, image="new:1").content.decode())
        assert "has an open stop operation (op-stop-1)" in body
        assert Operation.objects.count() == 1

    def test_a_stopped_units_change_waits_for_its_start(self, member_client, tenant):
        unit = unit_in(tenant, "Stopped")
        edit(member_client, unit, image="new:1")
        unit.refresh_from_db()
        assert (unit.phase, unit.generation, unit.image) == ("Stopped", 2, "new:1")
        assert "the change takes effect when it is started" in messages_of(member_client, unit)

    def test_an_ending_unit_cannot_be_edited(self, member_client, tenant):
        unit = unit_in(tenant, "Terminated")
        assert member_client.get(edit_url(unit))["Location"] == detail(unit)
        member_client.post(edit_url(unit), {"image": "new:1", "etag": unit.etag})
        assert not Operation.objects.exists()


class TestUnitList:
    def test_stopped_units_are_listed_with_their_badge_and_auto_stop(self, member_client, tenant):
        stops = timezone.now() + timedelta(hours=2)
        unit_in(tenant, name="running", stop_after="8h", stops_at=stops)
        unit_in(tenant, "Stopped", name="resting")
        unit_in(tenant, "Stopping", name="going")
        unit_in(tenant, "Terminated", name="gone")
        body = member_client.get(UNITS).content.decode()
        assert '<span class="phase phase-stopped" data-phase="Stopped">' in body
        assert '<span class="phase phase-stopping" data-phase="Stopping">' in body
        assert 'data-unit="gone"' not in body
        running = body.split('data-unit="running"')[1].split("</tr>")[0]
        assert "stops <time datetime=" in running
        assert f"{stops:%Y-%m-%d %H:%M}</time>" in running
        resting = body.split('data-unit="resting"')[1].split("</tr>")[0]
        assert "unit-stops" not in resting

    def test_showing_terminated_units_too_is_kept_across_pages(
        self, member_client, tenant, monkeypatch
    ):
        monkeypatch.setattr("dashboard.views.PAGE_SIZE", 1)
        unit_in(tenant, "Terminated", name="gone")
        unit_in(tenant, name="running")
        body = member_client.get(UNITS).content.decode()
        assert "1 Terminated unit not shown" in body
        assert 'rel="next"' not in body  # one page: the Terminated unit is not counted
        everything = member_client.get(UNITS, {"phase": "all"}).content.decode()
        assert f'href="{UNITS}?phase=all&amp;page=2" rel="next"' in everything
        second = member_client.get(UNITS, {"phase": "all", "page": 2}).content.decode()
        assert 'data-unit="gone"' in second
        assert f'href="{UNITS}?phase=all&amp;page=1" rel="prev"' in second
