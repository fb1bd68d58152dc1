"""The API's JSON parser (pure): strict I-JSON, so nothing a client sends is reinterpreted."""

import io
import json

import pytest
from rest_framework.exceptions import ParseError, UnsupportedMediaType

from controlplane.api import parsers


def parse(text: str, **meta):
    request = type("Request", (), {"META": meta})()
    return parsers.StrictJSONParser().parse(
        io.BytesIO(text.encode("utf-8", "surrogatepass")), parser_context={"request": request}
    )


def test_plain_documents_parse_as_json_does():
    text = '{"a": [1, 2.5, "x", null, true], "b": {"c": "\\u00e9"}}'
    assert parse(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"a": 1, "a": 2}', 'the key "a" appears twice'),
        ('{"a": {"b": 1, "b": 1}}', 'the key "b" appears twice'),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ('{"a": 1e400}', "out of range"),
        ('{"\\ud800": 1}', "lone surrogate"),
        ('{"a": "\\udfff"}', "lone surrogate"),
        ('{"t": ' + "[" * 33 + "]" * 33 + "}", "nested deeper than 32"),
        ("[" * 10_000 + "]" * 10_000, "nested deeper than 32"),
        ('{"a": ', "JSON parse error"),
    ],
)
def test_what_json_loads_would_reinterpret_is_refused(text, says):
    with pytest.raises(ParseError) as refused:
        parse(text)
    assert says in str(refused.value.detail)


def test_depth_limit_allows_thirty_two_levels():
    assert parse("[" * 32 + "]" * 32)


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate, gzip"])
def test_a_content_encoding_is_415(encoding):
    with pytest.raises(UnsupportedMediaType):
        parse('{"a": 1}', HTTP_CONTENT_ENCODING=encoding)


def test_identity_encoding_is_plain():
    assert parse('{"a": 1}', HTTP_CONTENT_ENCODING="identity") == {"a": 1}
