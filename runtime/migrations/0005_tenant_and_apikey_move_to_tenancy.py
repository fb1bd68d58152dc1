# Tenant and ApiKey now belong to the tenancy app (tenancy.0001 took them over in Django's
# state). Only the state changes here: the foreign keys point at the same table as before.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runtime", "0004_drop_indexes_covered_by_composites"),
        ("tenancy", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="gpuunit",
                    name="tenant",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="units", to="tenancy.tenant"),
                ),
                migrations.AlterField(
                    model_name="operation",
                    name="tenant",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="operations", to="tenancy.tenant"),
                ),
                migrations.DeleteModel(name="ApiKey"),
                migrations.DeleteModel(name="Tenant"),
            ],
            database_operations=[],
        ),
    ]
