"""The base of every API view: query parameters it does not define are refused, as unknown
body fields are, so a misspelt filter (`?packageId=`) never silently returns everything."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.views import APIView


class StrictQueryMixin:
    """Refuses query parameters outside `query_params` with a 400 in the envelope, once the
    request is authenticated and allowed (so a stranger still learns only 401)."""

    query_params: frozenset[str] = frozenset()

    def allowed_query_params(self, request: Request) -> frozenset[str]:
        return self.query_params

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        unknown = sorted(set(request.query_params) - self.allowed_query_params(request))
        if unknown:
            raise exceptions.ValidationError(
                {name: ["Unknown query parameter."] for name in unknown}
            )


class ApiView(StrictQueryMixin, APIView):
    """An APIView that refuses unknown query parameters."""
