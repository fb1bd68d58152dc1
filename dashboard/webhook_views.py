"""What is a webhook's own on the dashboard, beside its generic page (dashboard/resources.py):
send it a test event, rotate its signing secret (the new one shown once), and read what became
of its deliveries."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone

from controlplane.errors import NotFound, Throttled
from controlplane.resources import Made
from dashboard import queries
from dashboard.pages import HtmxHttpRequest
from dashboard.resources import WEBHOOK_PAGE, ResourceListView, ResourceView
from tenancy import audit, webhooks
from tenancy.models import WebhookEndpoint


class WebhookPage(ResourceView):
    of = WEBHOOK_PAGE

    def endpoint(self, key: str) -> WebhookEndpoint:
        tenant = self.chosen_tenant()
        try:
            return webhooks.endpoint_of(tenant, key)
        except NotFound:
            return self.found(None, self.what)

    def deliveries_url(self, endpoint: WebhookEndpoint) -> str:
        url = reverse("dashboard:webhook-deliveries", kwargs={"key": endpoint.uid})
        return f"{url}?tenant={endpoint.tenant.slug}" if self.scope.is_staff else url


class WebhookTestView(WebhookPage):
    """POST: a webhook.test event to this webhook now; its delivery shows on its page."""

    acts = True

    def post(self, request: HtmxHttpRequest, key: str) -> HttpResponse:
        endpoint = self.endpoint(key)
        try:
            webhooks.send_test(endpoint)
        except Throttled as error:
            messages.error(request, error.message[:1].upper() + error.message[1:])
        else:
            audit.note(request, target_name=str(endpoint.uid))
            messages.success(request, "Test event sent: its delivery is listed below.")
        return HttpResponseRedirect(self.deliveries_url(endpoint))


class WebhookRotateView(WebhookPage, ResourceListView):
    """POST: a new signing secret, shown on this answer only; the previous one keeps signing
    beside it for the overlap."""

    acts = True

    def get(self, request: HtmxHttpRequest, key: str) -> HttpResponse:  # type: ignore[override]
        return HttpResponseRedirect(self.list_url(self.chosen_tenant()))

    def post(self, request: HtmxHttpRequest, key: str) -> HttpResponse:  # type: ignore[override]
        endpoint = webhooks.rotate_secret(self.endpoint(key))
        audit.note(request, target_name=str(endpoint.uid))
        until = endpoint.previous_secret_until or timezone.now()
        return self.show(
            self.declared.form(),
            made=Made(endpoint, shown_once=endpoint.secret),
            says=f"New signing secret for the webhook to {endpoint.url}. Copy it now: it is "
            f"shown this once. The previous one keeps signing beside it until "
            f"{until:%Y-%m-%d %H:%M} UTC.",
        )


class WebhookDeliveriesView(WebhookPage):
    """The webhook's latest deliveries: event, status, attempts, its receiver's last answer."""

    def get(self, request: HtmxHttpRequest, key: str) -> HttpResponse:
        endpoint = self.endpoint(key)
        return self.page(
            "dashboard/webhook_deliveries.html",
            {
                "page": self.declared,
                "endpoint": endpoint,
                "tenant": endpoint.tenant,
                "deliveries": queries.list_webhook_deliveries(endpoint),
                "back": self.list_url(endpoint.tenant),
            },
        )
