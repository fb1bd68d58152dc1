"""Who may log in to the dashboard and the admin: throttling (django-axes, configured in
settings: an attempt counts against controlplane.ratelimit.client_address; the page shown to
someone locked out) and the operator's lock of an account at every address."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from controlplane.errors import NotFound

log = logging.getLogger(__name__)


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


def lock_account(*, username: str) -> None:
    """Refuse `username` at every address until unlock_account: failed passwords lock an account
    only at the address they came from, so locking it everywhere is an operator's decision. It
    is Django's is_active (the admin's "Active" box): the password is refused and the account's
    sessions end, in the dashboard and the admin alike."""
    _set_active(username, active=False)
    log.warning("account %s locked by an operator", username)


def unlock_account(*, username: str) -> None:
    """Undo lock_account. Failures counted by the throttle meanwhile expire on their own
    (`axes_reset_username` clears them now)."""
    _set_active(username, active=True)
    log.warning("account %s unlocked by an operator", username)


def _set_active(username: str, *, active: bool) -> None:
    user_model = get_user_model()
    found = user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username})
    if not found.update(is_active=active):
        raise NotFound(f"no account {username!r}")
