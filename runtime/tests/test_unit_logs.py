"""GET /gpu-units/{name}/logs through the API, the kube client's log API and the development
cluster's kubelet (KWOK's, serving the node agent's files): the log as text, its options, a
followed log that streams new lines and ends, and the refusals (in the JSON envelope) for
units without a pod."""

from __future__ import annotations

import re
import threading

import pytest

from catalog.tests.factories import ARTICLE_PACKAGE_ID, PackageFactory
from runtime.models import GPUUnit
from runtime.tests.helpers import remove_namespace_objects, wait_for_phase, wait_until
from tenancy.tests.factories import TenantFactory
from tests.endpoints import EndpointTest, client_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("celery_worker")]


@pytest.fixture
def running(auth_client, tenant):
    PackageFactory(article=True)
    body = {
        "operationID": "logs-1",
        "name": "talker",
        "packageID": ARTICLE_PACKAGE_ID,
        "image": "python:3.12",
        "template": {"command": ["python", "-u", "train.py"]},
    }
    assert auth_client.post("/api/v1/gpu-units", body, format="json").status_code == 201
    yield wait_for_phase(GPUUnit.objects.get(name="talker"), "Running")
    remove_namespace_objects(tenant.namespace)


class TestUnitLogs(EndpointTest):
    path = "/api/v1/gpu-units/{name}/logs"

    def test_the_log_is_text_with_the_kubelet_s_lines_and_the_container_s(
        self, auth_client, cluster, running
    ):
        cluster.append_log(running.namespace, "unit-talker", ["epoch 1 loss 0.9", "epoch 2"])
        response = self.call(auth_client, name="talker")
        assert response.status_code == 200
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        text = response.content.decode()
        assert "devstack: image python:3.12" in text
        assert "devstack: command python -u train.py" in text
        assert text.endswith("epoch 1 loss 0.9\nepoch 2\n")

    def test_tail_lines_and_timestamps(self, auth_client, cluster, running):
        cluster.append_log(running.namespace, "unit-talker", ["a", "b", "c"])
        tail = self.call(auth_client, name="talker", query={"tailLines": 2}).content.decode()
        assert tail == "b\nc\n"
        stamped = self.call(
            auth_client, name="talker", query={"tailLines": 1, "timestamps": "true"}
        ).content.decode()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z c\n", stamped), stamped

    def test_follow_streams_new_lines_until_its_deadline(
        self, auth_client, cluster, running, settings
    ):
        """Lines printed after the request arrive on the open stream, which ends at
        LOGS_FOLLOW_SECONDS. (A kubelet also ends it when the container exits; KWOK's
        kubelet cannot tell, so here the deadline ends it.)"""
        # Long enough that a busy machine still prints the line while the stream is open (it
        # is printed as soon as the log so far has arrived); the test then waits it out.
        settings.LOGS_FOLLOW_SECONDS = 10
        response = self.call(auth_client, name="talker", query={"follow": "true"})
        assert response.status_code == 200
        assert response.streaming
        chunks: list[bytes] = []
        reader = threading.Thread(target=lambda: chunks.extend(response.streaming_content))
        reader.start()
        wait_until(lambda: b"devstack: started" in b"".join(chunks), "the log so far")
        cluster.append_log(running.namespace, "unit-talker", ["new line"])
        reader.join(timeout=30)
        assert not reader.is_alive(), "the followed log did not end at its deadline"
        assert b"new line\n" in b"".join(chunks)

    def test_bad_options_are_400_naming_them(self, auth_client, running):
        for query, field in (
            ({"tailLines": 0}, "tailLines"),
            ({"sinceSeconds": "soon"}, "sinceSeconds"),
            ({"container": "Not_A_Name"}, "container"),
            ({"lines": 5}, "lines"),
        ):
            error = self.get_error_response(
                auth_client, status=400, code="invalid_request", name="talker", query=query
            )
            assert field in error["details"]["fields"]

    def test_a_container_the_pod_lacks_is_400_with_the_kubelet_s_words(self, auth_client, running):
        error = self.get_error_response(
            auth_client,
            status=400,
            code="invalid_request",
            name="talker",
            query={"container": "sidecar"},
        )
        assert "container sidecar is not valid for pod unit-talker" in error["message"]
        assert "container" in error["details"]["fields"]

    def test_a_terminated_unit_or_another_tenant_s_is_404(self, auth_client, running):
        other = client_for(TenantFactory())
        self.get_error_response(other, status=404, code="not_found", name="talker")
        assert auth_client.delete("/api/v1/gpu-units/talker").status_code == 202
        wait_for_phase(running, "Terminated")
        error = self.get_error_response(auth_client, status=404, code="not_found", name="talker")
        assert "terminated" in error["message"]

    def test_a_stopped_unit_s_log_is_a_conflict_saying_how_to_get_one(self, auth_client, running):
        stop = {"operationID": "logs-stop"}
        assert (
            auth_client.post("/api/v1/gpu-units/talker/stop", stop, format="json").status_code
            == 202
        )
        wait_for_phase(running, "Stopped")

        error = self.get_error_response(
            auth_client, status=409, code="logs_unavailable", name="talker"
        )

        assert error["message"].startswith("gpu unit talker is Stopped: it has no pod, so no log.")
        assert "POST /gpu-units/{name}/start" in error["message"]

    def test_statements_are_the_baseline(self, auth_client, running):
        self.assert_statement_count(auth_client, name="talker")
