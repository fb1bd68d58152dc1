# Tenant and ApiKey move here from the runtime app. Their tables stay where they are: this
# migration only takes them over in Django's state (the rows are never copied); 0002 renames
# the tables to this app's names.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("runtime", "0004_drop_indexes_covered_by_composites"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Tenant",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("slug", models.SlugField(help_text="Short ID, a DNS label.", max_length=63, unique=True)),
                        ("display_name", models.CharField(blank=True, max_length=200)),
                        ("namespace", models.CharField(help_text="Kubernetes namespace holding the tenant's units.", max_length=63, unique=True)),
                        ("quota_cpu", models.CharField(default="160", max_length=32, verbose_name="CPU quota")),
                        ("quota_memory", models.CharField(default="256Gi", max_length=32, verbose_name="memory quota")),
                        ("quota_claims", models.PositiveIntegerField(default=64, verbose_name="claim quota")),
                        ("is_operator", models.BooleanField(default=False, help_text="Operator keys may read the cluster-wide inventory.")),
                        ("used_cpu_millicores", models.BigIntegerField(default=0, editable=False)),
                        ("used_memory_bytes", models.BigIntegerField(default=0, editable=False)),
                        ("used_claims", models.IntegerField(default=0, editable=False)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("users", models.ManyToManyField(blank=True, help_text="Dashboard users who act for this tenant.", related_name="tenants", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={"ordering": ["slug"], "db_table": "runtime_tenant"},
                ),
                migrations.CreateModel(
                    name="ApiKey",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.CharField(blank=True, help_text="What the key is used for.", max_length=100)),
                        ("prefix", models.CharField(editable=False, max_length=16, unique=True)),
                        ("key_hash", models.CharField(editable=False, max_length=64)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, editable=False, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="api_keys", to="tenancy.tenant")),
                    ],
                    options={"verbose_name": "API key", "ordering": ["-created_at"], "db_table": "runtime_apikey"},
                ),
            ],
            database_operations=[],
        ),
    ]
