"""WSGI entry point for gunicorn."""

import gc
import io
import os
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")


class ChunkedBody:
    """Reads a chunked request body (no Content-Length) before Django sees the request.

    Django reads exactly CONTENT_LENGTH bytes of wsgi.input and takes a missing length as an
    empty body, so a client that streams its JSON (`Transfer-Encoding: chunked`, as curl does
    with `-H 'Transfer-Encoding: chunked'` and many HTTP libraries do for generated bodies)
    would have it dropped. gunicorn decodes the chunks; this buffers at most one byte more than
    Django would take and sets the length, so an oversized stream is refused like a declared
    one (413 under /api/)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.limit = max(settings.API_MAX_BODY_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE) + 1

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower() and not environ.get(
            "CONTENT_LENGTH"
        ):
            body = environ["wsgi.input"].read(self.limit)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return self.app(environ, start_response)


application = ChunkedBody(get_wsgi_application())

# Garbage collection tuned for a request server (measured in docs/benchmarks.md: ~12% of a
# create's CPU). Everything loaded so far (Django, the URLconf and the views it imports) lives
# as long as the process, so it is frozen out of the collector's walks; and a request allocates
# thousands of short-lived objects freed by reference counting, so the youngest generation is
# collected every 50,000 allocations rather than every 700.
get_resolver().url_patterns  # noqa: B018 - import every view now, before the freeze
gc.freeze()
gc.set_threshold(50_000, 50, 100)
