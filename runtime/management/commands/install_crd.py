"""`manage.py install_crd`: create or update the GPUUnit CRD in the configured cluster."""

from typing import Any

from django.core.management.base import BaseCommand

from runtime.control.provisioning import install_crd


class Command(BaseCommand):
    help = "Create or update the GPUUnit CustomResourceDefinition (k8s/gpuunit-crd.yaml)."

    def handle(self, *args: Any, **options: Any) -> None:
        install_crd()
        self.stdout.write("GPUUnit CRD installed")
