"""`manage.py install_crd [--cluster NAME]`: create or update the GPUUnit CRD in a cluster."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from controlplane import kube
from runtime.control.provisioning import install_crd


class Command(BaseCommand):
    help = (
        "Create or update the GPUUnit CustomResourceDefinition (k8s/gpuunit-crd.yaml) in the "
        "control plane's own cluster, or in a registered cluster (--cluster): every cluster "
        "units are placed in needs it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", default=kube.HOME, help="a registered cluster's name")

    def handle(self, *args: Any, cluster: str, **options: Any) -> None:
        with kube.using(cluster):
            install_crd()
        self.stdout.write(f"GPUUnit CRD installed in {cluster or 'the own cluster'}")
