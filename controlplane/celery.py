"""Celery application; configuration comes from Django settings (CELERY_* names)."""

import os

from celery import Celery

from controlplane.beat import beat_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.beat_schedule = {}
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **_kwargs: object) -> None:
    sender.conf.beat_schedule = beat_schedule()
