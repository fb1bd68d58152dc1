"""How the dashboard shows where a unit is reached (its URL and endpoints on the unit page)
and orders units with ports (the order form's ports field and primary port's scheme)."""

from __future__ import annotations

import pytest

from dashboard.tests.conftest import make_unit
from dashboard.tests.test_views import detail, live, order
from runtime import access
from runtime.models import GPUUnit

pytestmark = pytest.mark.django_db

HTTP_AND_METRICS = {
    "ports": [
        {"name": "http", "port": 8080, "protocol": "TCP"},
        {"name": "metrics", "port": 9100, "protocol": "UDP"},
    ]
}
SSH_PORT = {"ports": [{"name": "ssh", "port": 22, "protocol": "TCP"}]}


@pytest.fixture
def gateway(settings):
    settings.ACCESS_DOMAIN = "units.gpu.example.com"
    settings.ACCESS_GATEWAY = "gateway-system/gpu-gateway"
    settings.ACCESS_PUBLIC_SCHEME = "https"


@pytest.fixture
def node_ports(settings):
    settings.ACCESS_TCP_SERVICE_TYPE = "NodePort"
    settings.ACCESS_TCP_HOST = "203.0.113.7"


def access_card(body: str) -> str:
    return body.split('aria-labelledby="access-heading"')[1].split("</section>")[0]


class TestUnitPageAccess:
    def test_public_http_url_is_a_link_beside_the_endpoints(self, member_client, tenant, gateway):
        unit = make_unit(
            tenant,
            "demo",
            template=HTTP_AND_METRICS,
            access={"primaryPort": "http", "scheme": "http"},
        )
        url = f"https://{access.hostname(unit.namespace, 'demo', 'units.gpu.example.com')}"
        card = access_card(member_client.get(detail(unit)).content.decode())
        assert f'<a class="unit-url" href="{url}">{url}</a>' in card
        assert "of port http" in card
        assert '<td data-label="Port" class="port">9100/UDP</td>' in card
        # The second port is reached inside the cluster only: text, not a link.
        in_cluster = f"udp://unit-demo.{unit.namespace}.svc.cluster.local:9100"
        assert f"<code>{in_cluster}</code>" in card
        assert f'href="{in_cluster}"' not in card
        assert "2 ports" in card
        assert card.count('<span class="badge badge-primary">primary</span>') == 1

    def test_tcp_url_is_text_to_copy_not_a_link(self, member_client, tenant, node_ports):
        unit = make_unit(
            tenant,
            "demo",
            template=SSH_PORT,
            access={"primaryPort": "ssh", "scheme": "tcp"},
            exposed={"nodePorts": {"ssh": 30022}},
        )
        card = access_card(member_client.get(detail(unit)).content.decode())
        assert '<code id="unit-url" class="unit-url">tcp://203.0.113.7:30022</code>' in card
        assert 'href="tcp://' not in card
        # Shown by dashboard.js; without JavaScript the text is there to select.
        assert 'data-copy="unit-url" hidden>Copy' in card

    def test_tcp_url_is_not_known_until_the_node_port_is(self, member_client, tenant, node_ports):
        unit = make_unit(
            tenant, "demo", template=SSH_PORT, access={"primaryPort": "ssh", "scheme": "tcp"}
        )
        page = member_client.get(detail(unit))
        assert "Not known yet" in access_card(page.content.decode())
        since = page.context["live"]["digest"]
        assert member_client.get(live(unit), {"since": since}).status_code == 204
        # Provisioning saw the Service's node port: the live part brings the URL.
        GPUUnit.objects.filter(pk=unit.pk).update(exposed={"nodePorts": {"ssh": 30022}})
        response = member_client.get(live(unit), {"since": since})
        assert response.status_code == 200
        assert "tcp://203.0.113.7:30022" in response.content.decode()

    def test_in_cluster_http_url_is_not_a_link_when_nothing_exposes_it(
        self, member_client, tenant, settings
    ):
        settings.ACCESS_DOMAIN = ""
        unit = make_unit(tenant, "demo", template=HTTP_AND_METRICS, access={"primaryPort": "http"})
        card = access_card(member_client.get(detail(unit)).content.decode())
        url = f"http://unit-demo.{unit.namespace}.svc.cluster.local:8080"
        assert f'<code id="unit-url" class="unit-url">{url}</code>' in card
        assert f'href="{url}"' not in card
        assert "Reachable inside the cluster only" in card

    def test_terminated_unit_links_nowhere(self, member_client, tenant, gateway):
        unit = make_unit(
            tenant,
            "demo",
            phase="Terminated",
            template=HTTP_AND_METRICS,
            access={"primaryPort": "http", "scheme": "http"},
        )
        card = access_card(member_client.get(detail(unit)).content.decode())
        assert "these addresses no longer answer" in card
        assert "href=" not in card

    def test_unit_without_ports_shows_no_access(self, member_client, tenant, gateway):
        unit = make_unit(tenant, "demo")
        body = member_client.get(detail(unit)).content.decode()
        assert "access-heading" not in body
        assert "Not known yet" not in body


class TestOrderWithPorts:
    def test_ports_and_scheme_become_the_units_template_and_access(self, member_client, package):
        response = order(member_client, ports="http:8080, metrics:9100/udp", scheme="https")
        unit = GPUUnit.objects.get()
        assert response["Location"] == detail(unit)
        assert unit.template == HTTP_AND_METRICS
        assert unit.access == {"primaryPort": "http", "scheme": "https"}

    def test_no_ports_means_no_access_whatever_the_scheme(self, member_client, package):
        order(member_client, ports=" , ", scheme="tcp")
        unit = GPUUnit.objects.get()
        assert (unit.template, unit.access) == ({}, {})

    def test_form_offers_the_ports_and_the_scheme(self, member_client, package):
        body = member_client.get("/units/new").content.decode()
        assert 'name="ports"' in body
        assert '<option value="http" selected>' in body
        assert '<option value="tcp">' in body

    @pytest.mark.parametrize(
        ("ports", "message"),
        [
            ("http", "“http” is not a port: write each as name:number"),
            ("http:8080 metrics:9100", "“http:8080 metrics:9100” is not a port"),
            ("metrics-exporter1:9100", "metrics-exporter1:9100: name must be an IANA service"),
            ("http:8080, http:9090", "http:9090: port name http is listed twice."),
            ("http:8080, web:8080", "web:8080: port 8080/TCP is listed twice."),
            ("http:70000", "http:70000: port must be an integer from 1 to 65535."),
            ("HTTP:80", "HTTP:80: name must be an IANA service name"),
            ("web:80/SCTP", "web:80/SCTP: protocol must be TCP or UDP."),
            ("dns:53/UDP, http:80", "the primary port must be a TCP port."),
        ],
    )
    def test_bad_ports_are_shown_next_to_the_ports_field(
        self, member_client, package, ports, message
    ):
        response = order(member_client, ports=ports)
        assert response.status_code == 200
        body = response.content.decode()
        error_block = body.split('id="id_ports_error"')[1].split("</ul>")[0]
        assert message in error_block
        assert '<a href="#id_ports">Ports</a>' in body
        assert f'value="{ports}"' in body  # kept, to be corrected
        assert not GPUUnit.objects.exists()

    def test_a_bad_scheme_is_shown_next_to_the_scheme(self, member_client, package):
        body = order(member_client, ports="http:80", scheme="ftp").content.decode()
        assert "Select a valid choice" in body.split('id="id_scheme_error"')[1]
        assert not GPUUnit.objects.exists()

    def test_service_refusal_about_a_port_lands_on_the_ports_field(
        self, member_client, package, monkeypatch
    ):
        from runtime.errors import InvalidRequest

        def refuse(**kwargs):
            raise InvalidRequest(
                "no",
                details={
                    "fields": {
                        "template.ports[1].name": ["name is taken."],
                        "access.primaryPort": ["not that one."],
                    }
                },
            )

        monkeypatch.setattr("dashboard.views.orders.create_unit", refuse)
        body = order(member_client, ports="http:80, web:81").content.decode()
        error_block = body.split('id="id_ports_error"')[1].split("</ul>")[0]
        assert "web:81: name is taken." in error_block
        assert "not that one." in error_block
        assert "The unit was not ordered" in body
