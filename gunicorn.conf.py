"""gunicorn reads this file from the working directory on every start (the image, `make run`,
the benches): the Prometheus multi-process directory is emptied before workers fork, a worker
that exits leaves its live gauges, gunicorn's own error answers are JSON in the API's
envelope, and the workers know their thread count (WEB_THREADS)."""

import json
import os

from gunicorn import util

from controlplane import metrics

# gunicorn answers some requests itself, before Django sees them (a header over
# limit_request_field_size is a 431, a request line over limit_request_line a 414), with an
# HTML page it writes through util.write_error; it has no setting or hook for that page, so the
# writer is replaced here with one writing the envelope every /api/ answer has.
_CODES = {
    400: "invalid_request",
    403: "forbidden",
    414: "uri_too_long",
    417: "expectation_failed",
    431: "headers_too_large",
    500: "internal_error",
    501: "not_implemented",
}


def write_json_error(sock, status_int: int, reason: str, mesg: str) -> None:
    body = json.dumps(
        {
            "error": {
                "code": _CODES.get(status_int, "error"),
                "message": f"{reason}: {mesg}" if mesg else reason,
                "details": {},
            }
        }
    )
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, (head + body).encode("latin1"))


util.write_error = write_json_error


def on_starting(server) -> None:
    # The workers' settings size the followed-log cap from the threads they really run with
    # (LOGS_FOLLOWERS_PER_PROCESS); workers fork from here and load Django after.
    os.environ["WEB_THREADS"] = str(server.cfg.threads)
    metrics.clear_multiprocess_directory()


def child_exit(server, worker) -> None:
    metrics.mark_process_dead(worker.pid)
