"""Counts the SQL statements a request executes (Django's execute_wrapper, server side) and
returns the count in the `X-Bench-Statements` response header. Bench settings only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection
from django.http import HttpRequest, HttpResponse

HEADER = "X-Bench-Statements"


class StatementCountMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        count = 0

        def counter(execute: Callable, sql: str, params: Any, many: bool, context: dict) -> Any:
            nonlocal count
            count += 1
            return execute(sql, params, many, context)

        with connection.execute_wrapper(counter):
            response = self.get_response(request)
        response[HEADER] = str(count)
        return response
