"""Django app config for the project package (so its tasks and templates are discovered)."""

from django.apps import AppConfig


class ControlplaneConfig(AppConfig):
    name = "controlplane"
    verbose_name = "Control plane"
