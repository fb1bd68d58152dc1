"""gunicorn reads this file from the working directory on every start (the image, `make run`,
the benches): the Prometheus multi-process directory is emptied before workers fork, and a
worker that exits leaves its live gauges."""

from controlplane import metrics


def on_starting(server) -> None:
    metrics.clear_multiprocess_directory()


def child_exit(server, worker) -> None:
    metrics.mark_process_dead(worker.pid)
