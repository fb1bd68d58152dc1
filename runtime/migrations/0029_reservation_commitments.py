"""A reservation is billed while its slots hold devices (placeholder meters), not for its whole
window after its end: `charged_at` goes, and each scheduled or active reservation's commitment
is recorded in the ledger (billing.Commitment), as a new one's is when it is made."""

from django.db import migrations


def record_commitments(apps, schema_editor):
    Reservation = apps.get_model("runtime", "Reservation")
    Commitment = apps.get_model("billing", "Commitment")
    for reservation in Reservation.objects.filter(
        status__in=("Scheduled", "Active")
    ).select_related("package"):
        Commitment.objects.get_or_create(
            reservation_uid=reservation.uid,
            defaults={
                "tenant_id": reservation.tenant_id,
                "name": reservation.name,
                "package_id": reservation.package_id,
                "region": reservation.region,
                "slots": reservation.count,
                "devices": reservation.package.count,
                "start": reservation.start,
                "end": reservation.end,
            },
        )


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0028_unit_idle_hold"),
        ("billing", "0010_meter_placeholder_commitment"),
    ]

    operations = [
        migrations.RemoveField(model_name="reservation", name="charged_at"),
        migrations.RunPython(record_commitments, migrations.RunPython.noop),
    ]
