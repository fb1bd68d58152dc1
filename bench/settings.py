"""Bench-only settings: the product's settings plus the baseline views (bench/urls.py) and a
middleware that reports SQL statements per request in a response header."""

import tempfile
from pathlib import Path

from controlplane.settings import *  # noqa: F403
from controlplane.settings import MIDDLEWARE

ROOT_URLCONF = "bench.urls"
# Outermost, so every statement of the request (auth, throttling, view) is counted.
MIDDLEWARE = ["bench.middleware.StatementCountMiddleware", *MIDDLEWARE]
# The benches call the API only; an empty static root keeps whitenoise from warning.
STATIC_ROOT = Path(tempfile.gettempdir()) / "bench-static"
STATIC_ROOT.mkdir(exist_ok=True)
