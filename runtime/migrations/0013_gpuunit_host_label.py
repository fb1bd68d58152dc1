import base64
import hashlib
import re

from django.db import migrations, models
from django.db.models import Q


def label(namespace, unit, hash_chars, hashed):
    """access.host_label as it was written when this migration was (frozen here: the labels
    existing units' URLs already have must not change when access.py does)."""
    room = 63 - hash_chars - 2
    namespace_part = namespace[: max(room - len(unit), min(len(namespace), 12))]
    unit_part = unit[: room - len(namespace_part)]
    parts = [re.sub("-+", "-", part).strip("-") for part in (unit_part, namespace_part)]
    digest = base64.b32encode(hashlib.sha256(hashed.encode()).digest()).decode().lower()
    return "-".join([*(part for part in parts if part), digest[:hash_chars]])


def fill_host_labels(apps, schema_editor):
    """Every unit keeps the label its URL has today (a 6-character hash). Two live units that
    already share one (a 30-bit collision) cannot both keep it: the later one takes the next
    free label an order would give it (13 characters, "<namespace>/<unit>#n")."""
    GPUUnit = apps.get_model("runtime", "GPUUnit")
    taken = set()
    batch = []
    units = GPUUnit.objects.order_by("id").only("id", "namespace", "name", "phase")
    for unit in units.iterator(chunk_size=2000):
        unit.host_label = label(unit.namespace, unit.name, 6, f"{unit.namespace}/{unit.name}")
        if unit.phase != "Terminated":
            candidate = 0
            while unit.host_label in taken:
                candidate += 1
                unit.host_label = label(
                    unit.namespace, unit.name, 13, f"{unit.namespace}/{unit.name}#{candidate}"
                )
            taken.add(unit.host_label)
        batch.append(unit)
        if len(batch) == 1000:
            GPUUnit.objects.bulk_update(batch, ["host_label"])
            batch = []
    GPUUnit.objects.bulk_update(batch, ["host_label"])


class Migration(migrations.Migration):
    """Each unit's host label stored, unique among live units (issue 25, item 7)."""

    dependencies = [("runtime", "0012_operation_request_hash")]

    operations = [
        migrations.AddField(
            model_name="gpuunit",
            name="host_label",
            field=models.CharField(blank=True, max_length=63),
        ),
        migrations.RunPython(fill_host_labels, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="gpuunit",
            constraint=models.UniqueConstraint(
                condition=~Q(phase="Terminated") & ~Q(host_label=""),
                fields=("host_label",),
                name="unit_host_label_unique_while_live",
                violation_error_message="A live unit already has this host label.",
            ),
        ),
    ]
