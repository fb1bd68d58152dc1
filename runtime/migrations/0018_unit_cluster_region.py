from django.conf import settings
from django.db import migrations, models


def place_existing_units(apps, schema_editor):
    """Units ordered before the registry ran in the one cluster there was: the one that
    stands in as CLUSTER_NAME in CLUSTER_REGION (inventory.clusters.implicit)."""
    apps.get_model("runtime", "GPUUnit").objects.update(
        cluster=settings.CLUSTER_NAME, region=settings.CLUSTER_REGION
    )


class Migration(migrations.Migration):
    dependencies = [("runtime", "0017_unitevent_observed_at")]

    operations = [
        migrations.AddField(
            model_name="gpuunit",
            name="cluster",
            field=models.CharField(
                default="", help_text="the cluster the unit was placed in", max_length=63
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="gpuunit",
            name="region",
            field=models.CharField(
                default="", help_text="the cluster's region, when placed", max_length=63
            ),
            preserve_default=False,
        ),
        migrations.RunPython(place_existing_units, migrations.RunPython.noop, elidable=True),
    ]
