"""The API's error envelope as gpuctl reports it: the message, each field's problem by its
path, and an exit code by the class of the HTTP status."""

from __future__ import annotations

import json

import pytest
import requests

from gpuctl.client import error_of
from gpuctl.errors import ApiError, ExitCode, exit_code_for


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, ExitCode.USAGE),
        (413, ExitCode.USAGE),
        (428, ExitCode.USAGE),
        (401, ExitCode.AUTH),
        (403, ExitCode.AUTH),
        (404, ExitCode.NOT_FOUND),
        (409, ExitCode.CONFLICT),
        (412, ExitCode.CONFLICT),
        (429, ExitCode.THROTTLED),
        (500, ExitCode.UNAVAILABLE),
        (503, ExitCode.UNAVAILABLE),
        (0, ExitCode.UNAVAILABLE),
        (302, ExitCode.ERROR),
    ],
)
def test_each_status_class_has_its_exit_code(status, code):
    assert exit_code_for(status) == code


def response(status: int, body: bytes, **headers: str) -> requests.Response:
    answer = requests.Response()
    answer.status_code = status
    answer._content = body
    answer.headers.update(headers)
    answer.reason = "Reason"
    return answer


def envelope(code: str, message: str, details: dict | None = None) -> bytes:
    return json.dumps(
        {"error": {"code": code, "message": message, "details": details or {}}}
    ).encode()


def test_field_problems_are_named_by_their_path_in_the_request():
    details = {
        "fields": {
            "name": ["Ensure this field has no more than 54 characters."],
            "template": {"ports": [{}, {"port": ["must be 1-65535"]}]},
        }
    }
    error = error_of(response(400, envelope("invalid_request", "The request is invalid.", details)))
    assert (error.status, error.code, error.exit_code) == (400, "invalid_request", ExitCode.USAGE)
    assert error.lines() == [
        "The request is invalid. (400 invalid_request)",
        "  name: Ensure this field has no more than 54 characters.",
        "  template.ports[1].port: must be 1-65535",
    ]


def test_other_details_and_retry_after_are_shown():
    body = envelope("throttled", "Too many followers.", {"limit": "tenant", "errors": ["one"]})
    error = error_of(response(429, body, **{"Retry-After": "12"}))
    assert error.exit_code == ExitCode.THROTTLED
    assert error.transient
    assert error.lines() == [
        "Too many followers. (429 throttled)",
        "  limit: tenant",
        "  one",
        "  retry after 12 s",
    ]


def test_an_answer_without_the_envelope_is_reported_by_its_status_and_text():
    error = error_of(response(502, b"<html>\n  Bad   gateway </html>"))
    assert (error.code, error.message, error.exit_code) == (
        "http_error",
        "<html> Bad gateway </html>",
        ExitCode.UNAVAILABLE,
    )
    assert error_of(response(404, b"")).message == "Reason"


def test_not_found_and_conflicts_are_not_transient():
    assert not ApiError(404, "not_found", "gone").transient
    assert not ApiError(409, "invalid_state", "no").transient
    assert ApiError(0, "unreachable", "down").transient
