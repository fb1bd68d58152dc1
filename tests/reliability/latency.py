"""`python -m tests.reliability.latency URL KEY COUNT`: COUNT sequential GETs of URL with an
API key, each over a fresh connection (so they spread over the server's processes as separate
clients would), printing {"seconds": [...], "statuses": [...]} as JSON. A scenario runs it in a
process of its own, so the threads of the test process (the simulated cluster's among them) do
not sit between the clock and the answers it times. Status 0: no answer within 10 s."""

from __future__ import annotations

import http.client
import json
import sys
import time
from urllib.parse import urlsplit


def measure(url: str, key: str, count: int) -> dict[str, list]:
    address = urlsplit(url)
    path = address.path + (f"?{address.query}" if address.query else "")
    headers = {"Authorization": f"Bearer {key}", "Connection": "close"}
    seconds: list[float] = []
    statuses: list[int] = []
    for _ in range(count):
        started = time.perf_counter()
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
        except OSError:
            statuses.append(0)
        finally:
            connection.close()
        seconds.append(time.perf_counter() - started)
    return {"seconds": seconds, "statuses": statuses}


if __name__ == "__main__":
    target, api_key, times = sys.argv[1:4]
    json.dump(measure(target, api_key, int(times)), sys.stdout)
