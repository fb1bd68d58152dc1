"""WSGI entry point for gunicorn."""

import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

application = get_wsgi_application()

# Garbage collection tuned for a request server (measured in docs/benchmarks.md: ~12% of a
# create's CPU). Everything loaded so far (Django, the URLconf and the views it imports) lives
# as long as the process, so it is frozen out of the collector's walks; and a request allocates
# thousands of short-lived objects freed by reference counting, so the youngest generation is
# collected every 50,000 allocations rather than every 700.
get_resolver().url_patterns  # noqa: B018 - import every view now, before the freeze
gc.freeze()
gc.set_threshold(50_000, 50, 100)
