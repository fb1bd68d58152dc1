# The tables taken over from the runtime app get this app's names (renamed in place: rows,
# sequences, indexes and foreign keys stay), and so do their content types, so admin
# permissions granted on tenants and keys keep working.

from django.db import migrations

MOVED = ("tenant", "apikey")


def move_content_types(apps, schema_editor, source="runtime", target="tenancy"):
    content_type = apps.get_model("contenttypes", "ContentType")
    content_type.objects.using(schema_editor.connection.alias).filter(
        app_label=source, model__in=MOVED
    ).update(app_label=target)


def move_content_types_back(apps, schema_editor):
    move_content_types(apps, schema_editor, source="tenancy", target="runtime")


class Migration(migrations.Migration):

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("runtime", "0005_tenant_and_apikey_move_to_tenancy"),
        ("tenancy", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelTable(name="tenant", table=None),
        migrations.AlterModelTable(name="apikey", table=None),
        migrations.RunPython(move_content_types, move_content_types_back),
    ]
