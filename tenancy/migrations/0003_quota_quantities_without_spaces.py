# Quota quantities are parsed as the API server parses them, without surrounding spaces
# (dracel.quantity); Tenant.clean() strips them now, and this strips those stored before.

from django.db import migrations


def strip_quota_quantities(apps, schema_editor):
    tenant_model = apps.get_model("tenancy", "Tenant")
    for tenant in tenant_model.objects.using(schema_editor.connection.alias).all():
        cpu, memory = tenant.quota_cpu.strip(), tenant.quota_memory.strip()
        if (cpu, memory) != (tenant.quota_cpu, tenant.quota_memory):
            tenant.quota_cpu, tenant.quota_memory = cpu, memory
            tenant.save(update_fields=["quota_cpu", "quota_memory"])


class Migration(migrations.Migration):

    dependencies = [("tenancy", "0002_tables_of_this_app")]

    operations = [migrations.RunPython(strip_quota_quantities, migrations.RunPython.noop)]
