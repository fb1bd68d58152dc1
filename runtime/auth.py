"""API key authentication: `Authorization: Bearer <key>` identifies a tenant."""

from __future__ import annotations

import hmac
from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from controlplane import sql
from runtime.models import ApiKey, Tenant
from runtime.services import KEY_PREFIX, hash_key

# last_used_at is a hint for ops, not an audit log: write it at most once a minute per key.
_LAST_USED_GRANULARITY = timedelta(minutes=1)


class TenantPrincipal:
    """The `request.user` of an API call: the tenant behind the key."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, api_key: ApiKey) -> None:
        self.api_key = api_key
        self.tenant = api_key.tenant

    def __str__(self) -> str:
        return f"tenant:{self.tenant.slug}"


def _key_with_tenant(prefix: str) -> ApiKey | None:
    """The key with this prefix and its tenant, in one hand-written statement: every API
    request pays for this lookup, and building it with the ORM cost several times its query."""
    with sql.cursor() as cursor:
        cursor.execute(
            f"SELECT {sql.select_list(ApiKey, 'k')}, {sql.select_list(Tenant, 't')} "
            f"FROM {sql.table(ApiKey)} k JOIN {sql.table(Tenant)} t ON t.id = k.tenant_id "
            "WHERE k.prefix = %s",
            [prefix],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    api_key = sql.from_row(ApiKey, row)
    api_key.tenant = sql.from_row(Tenant, row, sql.width(ApiKey))
    return api_key


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, key = header.partition(" ")
        if scheme != self.keyword or not key.strip():
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <api key>'.")
        key = key.strip()
        parts = key.split("_", 2)
        if len(parts) != 3 or parts[0] != KEY_PREFIX:
            raise exceptions.AuthenticationFailed("Invalid API key.")
        api_key = _key_with_tenant(parts[1])
        if api_key is None or not hmac.compare_digest(api_key.key_hash, hash_key(key)):
            raise exceptions.AuthenticationFailed("Invalid API key.")
        if not api_key.is_active:
            raise exceptions.AuthenticationFailed("This API key has been revoked.")
        now = timezone.now()
        if api_key.last_used_at is None or now - api_key.last_used_at > _LAST_USED_GRANULARITY:
            ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        return TenantPrincipal(api_key), api_key

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="api"'
