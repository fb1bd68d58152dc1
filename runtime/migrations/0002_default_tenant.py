"""The default tenant owns the article's namespace and quota (160 CPU, 256Gi, 64 claims)."""

from django.db import migrations


def create_default_tenant(apps, schema_editor):
    Tenant = apps.get_model("runtime", "Tenant")
    Tenant.objects.get_or_create(
        slug="default",
        defaults={
            "display_name": "Default tenant",
            "namespace": "runtime-instance",
            "quota_cpu": "160",
            "quota_memory": "256Gi",
            "quota_claims": 64,
        },
    )


class Migration(migrations.Migration):
    dependencies = [("runtime", "0001_initial")]

    operations = [migrations.RunPython(create_default_tenant, migrations.RunPython.noop)]
