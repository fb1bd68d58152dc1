"""API key authentication: `Authorization: Bearer <key>` identifies a tenant.

Every API request looks its key up: one prepared, hand-written statement (tenancy/keys.py)."""

from __future__ import annotations

import hmac
from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenancy import keys, services
from tenancy.models import ApiKey, Tenant

# last_used_at is a hint for ops, not an audit log: write it at most once a minute per key.
_LAST_USED_GRANULARITY = timedelta(minutes=1)


class TenantPrincipal:
    """The `request.user` of an API call: the tenant behind the key."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, api_key: ApiKey) -> None:
        self.api_key = api_key
        self.tenant: Tenant = api_key.tenant

    def __str__(self) -> str:
        return f"tenant:{self.tenant.slug}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[TenantPrincipal, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, key = header.partition(" ")
        # RFC 9110 §11.1: the authentication scheme is case-insensitive.
        if scheme.lower() != self.keyword.lower() or not key.strip():
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <api key>'.")
        key = key.strip()
        parts = key.split("_", 2)
        if len(parts) != 3 or parts[0] != services.KEY_PREFIX:
            raise exceptions.AuthenticationFailed("Invalid API key.")
        api_key = keys.find_api_key(parts[1])
        if api_key is None or not hmac.compare_digest(api_key.key_hash, services.hash_key(key)):
            raise exceptions.AuthenticationFailed("Invalid API key.")
        if not api_key.is_active:
            raise exceptions.AuthenticationFailed("This API key has been revoked.")
        if (
            api_key.last_used_at is None
            or timezone.now() - api_key.last_used_at > _LAST_USED_GRANULARITY
        ):
            services.note_api_key_used(api_key=api_key)
        return TenantPrincipal(api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'
