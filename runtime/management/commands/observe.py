"""`manage.py observe`: the observer (runtime/control/observer.py) until SIGTERM or Ctrl-C."""

import logging
import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from controlplane import metrics
from inventory import clusters
from runtime.control.observer import Fleet

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Watch every enabled cluster and keep units and the inventory mirror current (for each "
        "cluster, one replica leads)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        observer = Fleet(clusters.enabled_names)

        def stop(_signum: int, _frame: object) -> None:
            observer.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        if settings.OBSERVER_METRICS_PORT:
            metrics.serve(settings.OBSERVER_METRICS_PORT)
        logger.info("observer %s starting", observer.identity)
        observer.run()
        logger.info("observer %s stopped", observer.identity)
