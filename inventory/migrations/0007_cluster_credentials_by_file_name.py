"""A cluster's kubeconfig becomes a file name in each process's CLUSTER_CREDENTIALS_DIR (issue
41): rows that held a path keep its last component, the name `import_clusters` always gave
(kubeconfig-<cluster>); the file must then be in that directory."""

import os

import controlplane.validation
from django.db import migrations, models


def paths_to_file_names(apps, schema_editor):
    Cluster = apps.get_model("inventory", "Cluster")
    for cluster in Cluster.objects.exclude(kubeconfig=""):
        name = os.path.basename(cluster.kubeconfig.rstrip("/"))
        if name != cluster.kubeconfig:
            Cluster.objects.filter(pk=cluster.pk).update(kubeconfig=name[:253])


class Migration(migrations.Migration):

    dependencies = [
        ("inventory", "0006_clusters_side_by_side"),
    ]

    operations = [
        migrations.RunPython(paths_to_file_names, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="cluster",
            name="kubeconfig",
            field=models.CharField(
                blank=True,
                help_text="file name of its kubeconfig in each process's CLUSTER_CREDENTIALS_DIR "
                "(each process mounts its own, with its own ServiceAccount's token), e.g. "
                "kubeconfig-eu-west; empty: KUBECONFIG, or the service account when the control "
                "plane runs in this cluster",
                max_length=253,
                validators=[controlplane.validation.validate_file_name],
            ),
        ),
    ]
