"""The API's JSON parser: strict I-JSON (RFC 7493), so nothing a client sends is reinterpreted.

DRF's stock parser is Python's `json.loads`, which lets the last of two equal keys win, takes
`NaN` and `Infinity`, turns `1e400` into `inf`, keeps lone surrogates (which then break the
error message that echoes them) and recurses until the interpreter gives up. Each of those is a
400 here, named, before any view sees the body. Request bodies that are not plain (a
`Content-Encoding` other than identity) are refused as 415 before parsing.
"""

from __future__ import annotations

import codecs
import json
import math
from typing import Any

from django.utils.http import parse_header_parameters
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.parsers import BaseParser

# Deeper than any document the API takes (a template is four levels); far below recursion limits.
MAX_DEPTH = 32


class _Refused(ValueError):
    pass


def _no_constants(name: str) -> float:
    raise _Refused(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:40]} is out of range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused(f"the key {json.dumps(key)} appears twice in one object")
        result[key] = value
    return result


def _check(value: Any, depth: int = 1) -> None:
    """Depth and Unicode: every string (keys included) must be encodable UTF-8."""
    if depth > MAX_DEPTH:
        raise _Refused(f"the document is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _Refused("a string holds a lone surrogate (\\ud800-\\udfff)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check(key, depth)
            _check(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check(item, depth + 1)


def loads(text: str) -> Any:
    """Parse one strict JSON document; `ValueError` (with a message for the client) if not."""
    try:
        document = json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constants,
            parse_float=_finite,
        )
    except RecursionError:
        raise _Refused(f"the document is nested deeper than {MAX_DEPTH} levels") from None
    _check(document)
    return document


def _text_codec(charset: str) -> bool:
    """Whether Python knows `charset` as a text encoding: bytes-to-bytes and str-to-str codecs
    (zlib_codec, base64_codec, rot13) are marked as not text, and decoding with them is no way
    to read a JSON body."""
    try:
        info = codecs.lookup(charset)
    except LookupError:
        return False
    return getattr(info, "_is_text_encoding", True)


class StrictJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        request = (parser_context or {}).get("request")
        encoding = request.META.get("HTTP_CONTENT_ENCODING", "") if request is not None else ""
        if encoding.strip().lower() not in ("", "identity"):
            raise UnsupportedMediaType(
                media_type,
                detail=f"Content-Encoding {encoding!r} is not accepted; send plain JSON.",
            )
        charset = (parser_context or {}).get("encoding") or "utf-8"
        if request is not None:
            # As sent: Django drops a charset it does not know and reads the body as UTF-8.
            _type, params = parse_header_parameters(request.META.get("CONTENT_TYPE", ""))
            charset = params.get("charset", charset)
        if not _text_codec(charset):
            raise UnsupportedMediaType(
                media_type,
                detail=f"charset {charset!r} is not a text encoding; send UTF-8 JSON.",
            )
        try:
            text = codecs.getreader(charset)(stream).read()
        except ValueError:
            # UnicodeDecodeError, and the UnicodeError some codecs raise for what they cannot
            # read at all (UTF-16 without a byte order mark, punycode, "undefined").
            raise ParseError(f"The body is not valid {charset}.") from None
        try:
            return loads(text)
        except _Refused as exc:
            raise ParseError(f"JSON parse error - {exc}.") from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


class MergePatchParser(StrictJSONParser):
    """JSON merge patch (RFC 7396) bodies, as strict as any other JSON the API takes."""

    media_type = "application/merge-patch+json"
