"""`gpuctl usage`'s total row adds what adds up: costs and device time across packages, never
their unit-seconds (issue 43, item 10)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuctl.tests.test_main import run  # noqa: F401 - the fixture

USAGE = {
    "groupBy": "package",
    "from": "2026-12-01T00:00:00Z",
    "to": "2026-12-07T00:00:00Z",
    "currency": "USD",
    "items": [
        {"package": "h100-1x", "seconds": "3600", "deviceSeconds": "3600", "cost": "4.00"},
        {"package": "l40s-2x", "seconds": "1800", "deviceSeconds": "3600", "cost": "1.00"},
    ],
    "total": {"seconds": "5400", "deviceSeconds": "7200", "cost": "5.00"},
}


@pytest.fixture
def api():
    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"data": USAGE}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_total_row_leaves_out_seconds_of_different_packages(run, api):  # noqa: F811
    code, out, err = run("usage", GPUCTL_API_URL=api, GPUCTL_API_KEY="k" * 20)

    assert code == 0, err
    total = next(line for line in out.splitlines() if line.strip().startswith("total"))
    assert "5400" not in total
    assert "7200" in total
    assert "5.00" in total
