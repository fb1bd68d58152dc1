"""Login throttling (django-axes, configured in settings): the client address an attempt counts
against, and the page shown to someone locked out of the dashboard or the admin."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse


def client_address(request: HttpRequest) -> str:
    """The address of the client, seen past LOGIN_TRUSTED_PROXIES proxies: each appends the
    address it was reached from to X-Forwarded-For, so the n-th entry from the right is the one
    the outermost trusted proxy saw (entries left of it are whatever the client sent)."""
    remote = request.META.get("REMOTE_ADDR", "")
    hops = settings.LOGIN_TRUSTED_PROXIES
    if hops <= 0:
        return remote
    forwarded = [
        entry.strip()
        for entry in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if entry.strip()
    ]
    # Fewer entries than proxies: the request did not come through them, so trust none.
    return forwarded[-hops] if len(forwarded) >= hops else remote


def lockout_response(
    request: HttpRequest, response: HttpResponse | None = None, credentials: dict | None = None
) -> HttpResponse:
    """A page in the look of the site the person was logging in to, saying why and for how long."""
    minutes = round(settings.AXES_COOLOFF_TIME.total_seconds() / 60)
    context = {
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "lockout_minutes": minutes,
        "title": "Too many failed logins",
    }
    if request.path.startswith(reverse("admin:index")):
        template = "admin/locked_out.html"
        context.update(admin.site.each_context(request))
    else:
        template = "registration/locked_out.html"
    return render(request, template, context, status=settings.AXES_HTTP_RESPONSE_CODE)
