"""The log tail on the unit page: the region that fetches it, its fragment (204 while the log is
unchanged, the reason when there is no log or no cluster), its own page for browsers without
JavaScript, and the customer's output escaped. The running unit is a real one: ordered through
the API, provisioned by the Celery worker on the simulated cluster, whose kubelet writes the
log a test appends to."""

from __future__ import annotations

import html

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from controlplane.errors import DomainError
from dashboard import logtail
from dashboard.tests.conftest import client_for, make_unit, make_user
from dashboard.tests.test_views import detail
from runtime.logs import LogsUnavailable
from runtime.models import GPUUnit, UnitPhase
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase

HOSTILE = '<script>alert("pwned")</script> & <img src=x onerror=alert(1)>'


def log_page(unit: GPUUnit) -> str:
    return f"/units/{unit.uid}/log/"


def log_live(unit: GPUUnit) -> str:
    return f"/units/{unit.uid}/log/live/"


class TestLegible:
    def test_terminal_codes_go_and_a_rewritten_line_reads_as_it_ended(self):
        raw = b"\x1b[32mok\x1b[0m\n 10%\r 50%\r100%\r\nbell\x07 \x1b]0;title\x07done\n\xff\n"
        assert logtail.legible(raw) == "ok\n100%\nbell done\n\ufffd\n"


class TestRegion:
    pytestmark = pytest.mark.django_db

    def test_unit_page_fetches_the_log_instead_of_waiting_for_it(
        self, member_client, tenant, monkeypatch
    ):
        def unreachable(*args, **kwargs):
            raise AssertionError("the unit page must not read the log itself")

        monkeypatch.setattr("dashboard.logtail.logs.read", unreachable)
        unit = make_unit(tenant, "demo")
        body = member_client.get(detail(unit)).content.decode()
        region = body.split('id="unit-log"')[1].split("</div>")[0]
        assert f'hx-get="{log_live(unit)}"' in region
        assert 'hx-trigger="load, every' in region
        assert f'href="{log_page(unit)}"' in region  # without JavaScript

    def test_terminated_unit_says_its_log_is_gone_and_polls_nothing(self, member_client, tenant):
        unit = make_unit(tenant, "demo", phase=UnitPhase.TERMINATED)
        body = member_client.get(detail(unit)).content.decode()
        assert "its pod, and the log with it, are gone" in body
        assert f'hx-get="{log_live(unit)}"' not in body

    def test_a_stopped_unit_says_it_has_no_pod_without_asking_the_cluster(
        self, member_client, tenant, monkeypatch
    ):
        def unreachable(*args, **kwargs):
            raise AssertionError("a stopped unit has no pod to read a log from")

        monkeypatch.setattr("dashboard.logtail.logs.read", unreachable)
        unit = make_unit(tenant, "demo", phase=UnitPhase.STOPPED)
        body = html.unescape(member_client.get(log_live(unit)).content.decode())
        assert "The unit is stopped: it has no pod, so there is no log" in body
        assert "Asking again" not in body

    def test_an_unreachable_cluster_is_a_message_not_an_error(
        self, member_client, tenant, monkeypatch
    ):
        def refuse(unit, options):
            raise DomainError("the cluster did not give the log: connection refused")

        monkeypatch.setattr("dashboard.logtail.logs.read", refuse)
        unit = make_unit(tenant, "demo")
        for path in (log_live(unit), log_page(unit)):
            response = member_client.get(path)
            assert response.status_code == 200
            assert "The log cannot be read right now: the cluster did not give the log: " in (
                response.content.decode()
            )

    def test_a_container_that_waits_says_why(self, member_client, tenant, monkeypatch):
        def waiting(unit, options):
            raise LogsUnavailable(
                'no log yet: container "main" in pod "unit-demo" is waiting to start: '
                "ContainerCreating"
            )

        monkeypatch.setattr("dashboard.logtail.logs.read", waiting)
        unit = make_unit(tenant, "demo", phase=UnitPhase.PENDING)
        body = html.unescape(member_client.get(log_live(unit)).content.decode())
        assert (
            'No log yet: the container has not started (container "main" in pod "unit-demo" is '
            "waiting to start: ContainerCreating). Asking again every" in body
        )

    def test_polling_stops_once_the_unit_is_terminated(self, member_client, tenant):
        unit = make_unit(tenant, "demo", phase=UnitPhase.TERMINATED)
        response = member_client.get(log_live(unit))
        assert response.status_code == 286  # htmx: swap this, then stop polling
        assert "are gone" in response.content.decode()
        assert (
            f'hx-get="{log_live(unit)}"' not in member_client.get(log_page(unit)).content.decode()
        )

    def test_a_cut_tail_says_so_and_drops_the_partial_line(
        self, member_client, tenant, monkeypatch
    ):
        data = (b"x" * 1000 + b"\n") * 262 + b"partial"
        monkeypatch.setattr(
            "dashboard.logtail.logs.read", lambda unit, options: data[: options.limit_bytes]
        )
        unit = make_unit(tenant, "demo")
        body = member_client.get(log_live(unit)).content.decode()
        assert "The last 261 lines, cut at 256 KiB" in body
        assert "partial" not in body

    def test_another_tenants_unit_log_is_not_found(self, member_client, other_tenant):
        unit = make_unit(other_tenant, "theirs")
        assert member_client.get(log_live(unit)).status_code == 404
        assert member_client.get(log_page(unit)).status_code == 404

    def test_anonymous_users_are_sent_to_login(self, client, tenant):
        unit = make_unit(tenant, "demo")
        assert client.get(log_page(unit))["Location"].startswith("/accounts/login/")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_worker")
class TestAgainstTheCluster:
    @pytest.fixture
    def running(self, auth_client, tenant):
        PackageFactory(article=True)
        body = {
            "operationID": "dash-logs-1",
            "name": "talker",
            "packageID": ARTICLE_PACKAGE_ID,
            "image": "python:3.12",
        }
        assert auth_client.post("/api/v1/gpu-units", body, format="json").status_code == 201
        yield wait_for_phase(GPUUnit.objects.get(name="talker"), "Running")
        remove_namespace_objects(tenant.namespace)

    def test_log_tail_is_escaped_and_answers_204_until_a_line_arrives(
        self, cluster, tenant, running
    ):
        member = client_for(make_user(tenant))
        cluster.append_log(running.namespace, "unit-talker", ["epoch 1 loss 0.9", HOSTILE])
        response = member.get(log_live(running))
        assert response.status_code == 200
        body = response.content.decode()
        assert "devstack: image python:3.12" in body
        assert "epoch 1 loss 0.9" in body
        assert "<script>" not in body
        assert "<img" not in body
        assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt; &amp; &lt;img" in body
        since = response.context["live"]["digest"]
        assert member.get(log_live(running), {"since": since}).status_code == 204
        cluster.append_log(running.namespace, "unit-talker", ["epoch 2 loss 0.5"])
        newer = member.get(log_live(running), {"since": since})
        assert newer.status_code == 200
        assert newer.content.decode().rstrip().split("</code>")[0].endswith("epoch 2 loss 0.5\n")
        # The page of its own shows the same tail.
        page = member.get(log_page(running)).content.decode()
        assert "epoch 2 loss 0.5" in page
        assert "<script>alert" not in page

    def test_tail_is_the_last_200_lines(self, cluster, tenant, running):
        cluster.append_log(running.namespace, "unit-talker", [f"line {n}" for n in range(300)])
        body = client_for(make_user(tenant)).get(log_live(running)).content.decode()
        assert "The last 200 lines" in body
        assert "line 100\n" in body
        assert "line 99\n" not in body

    def test_a_unit_without_a_pod_yet_says_so(self, tenant):
        unit = make_unit(tenant, "not-yet", phase=UnitPhase.ACCEPTED)
        body = client_for(make_user(tenant)).get(log_live(unit)).content.decode()
        assert "No log yet: the unit&#x27;s pod has not been created." in body
