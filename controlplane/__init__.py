"""Project package of the GPU control plane: settings, URLs, Celery app and API plumbing."""

from controlplane.celery import app as celery_app

__all__ = ("celery_app",)
