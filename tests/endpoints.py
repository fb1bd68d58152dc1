"""One test class per API endpoint (Sentry's shape): a class names its `method` and `path`
template and gets success and error helpers that check the envelope, and a statement count
held against the baseline in tests/query_counts.json (NetBox keeps one the same way). Change
a baseline only with the reason in the commit: a count that grows is a regression until shown
otherwise."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.db import connection
from rest_framework.test import APIClient

from tenancy.models import Tenant
from tenancy.tests.factories import key_for

QUERY_COUNTS_FILE = Path(__file__).with_name("query_counts.json")
QUERY_COUNTS: dict[str, int] = json.loads(QUERY_COUNTS_FILE.read_text())
_SAVEPOINTS = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")


def client_for(tenant: Tenant) -> APIClient:
    """An API client that sends a new key of `tenant`."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key_for(tenant)}")
    return client


class StatementLog:
    """The SQL statements run while recording, as a Django execute_wrapper sees them: the hook
    every cursor runs through, the prepared cursor of runtime/orders.py included, so the
    production cursor path stays in place (CaptureQueriesContext would switch it)."""

    def __init__(self) -> None:
        self.sql: list[str] = []

    def __call__(self, execute, sql, params, many, context):
        self.sql.append(sql)
        return execute(sql, params, many, context)

    @property
    def statements(self) -> list[str]:
        """What a request costs the server: the savepoints of the test's own transaction (a
        request's atomic blocks are transactions in production) left out."""
        return [sql for sql in self.sql if not sql.lstrip().upper().startswith(_SAVEPOINTS)]


@contextlib.contextmanager
def recording() -> Iterator[StatementLog]:
    log = StatementLog()
    with connection.execute_wrapper(log):
        yield log


class EndpointTest:
    """Base of an endpoint's test class: set `method` and `path` (e.g.
    "/api/v1/gpu-units/{name}", the route as tests/query_counts.json keys it)."""

    method = "get"
    path = ""

    @property
    def endpoint(self) -> str:
        return f"{self.method.upper()} {self.path}"

    def call(
        self,
        client: APIClient,
        *,
        data: Any = None,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        **path_args: str,
    ):
        url = self.path.format(**path_args)
        request = getattr(client, self.method)
        if self.method in ("get", "delete", "head"):
            return request(url, query or {}, headers=headers)
        return request(url, data, format="json", headers=headers)

    def get_success_response(self, client: APIClient, *, status: int = 200, **kwargs: Any):
        """The response, after checking its status and that it is JSON in the envelope."""
        response = self.call(client, **kwargs)
        assert response.status_code == status, response.content
        assert response["Content-Type"].startswith("application/json")
        assert "data" in response.json()
        return response

    def get_error_response(
        self, client: APIClient, *, status: int, code: str, **kwargs: Any
    ) -> dict[str, Any]:
        """The `error` of the response, after checking its status, code and envelope."""
        response = self.call(client, **kwargs)
        assert response.status_code == status, response.content
        assert response["Content-Type"].startswith("application/json")
        error = response.json()["error"]
        assert error["code"] == code, error
        return error

    def assert_statement_count(self, client: APIClient, **kwargs: Any) -> list[str]:
        """Call the endpoint and hold its statements against the baseline. The first request
        of a key in a minute also stamps its last use: warm the key before calling this."""
        with recording() as log:
            response = self.call(client, **kwargs)
        assert response.status_code < 400, response.content
        expected = QUERY_COUNTS[self.endpoint]
        statements = log.statements
        assert len(statements) == expected, (
            f"{self.endpoint} ran {len(statements)} statements, the baseline in "
            f"{QUERY_COUNTS_FILE.name} says {expected}:\n" + "\n".join(statements)
        )
        return statements
