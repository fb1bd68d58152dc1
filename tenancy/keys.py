"""The API key lookup every API request makes: one prepared, hand-written statement
(controlplane/statements.py), measured in docs/benchmarks.md."""

from __future__ import annotations

from controlplane import statements
from tenancy.models import ApiKey, Tenant


def find_api_key(prefix: str) -> ApiKey | None:
    """The API key with this prefix and its tenant, in one statement."""
    with statements.cursor() as sql:
        sql.execute(
            f"SELECT {statements.select_list(ApiKey, 'k')}, {statements.select_list(Tenant, 't')} "
            f"FROM {statements.table(ApiKey)} k "
            f"JOIN {statements.table(Tenant)} t ON t.id = k.tenant_id WHERE k.prefix = %s",
            [prefix],
        )
        row = sql.fetchone()
    if row is None:
        return None
    api_key = statements.from_row(ApiKey, row)
    assert api_key is not None  # an inner join: the key's columns are there
    api_key.tenant = statements.from_row(Tenant, row, statements.width(ApiKey))  # type: ignore[assignment]
    return api_key
