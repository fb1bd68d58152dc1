# The tables taken over from the runtime app get this app's names (renamed in place: rows,
# sequences, indexes and foreign keys stay), and so do their content types, so admin
# permissions granted on tenants and keys keep working.

from django.db import migrations

MOVED = ("tenant", "apikey")
# Django finds a field's unique, foreign key and index constraints by introspection whatever
# their names, except the varchar_pattern_ops "_like" indexes of PostgreSQL, which it drops by
# the name it would give them: those follow the table's new name.
LIKE_INDEXED = (("tenant", "slug"), ("tenant", "namespace"), ("apikey", "prefix"))


def move_content_types(apps, schema_editor, source="runtime", target="tenancy"):
    content_type = apps.get_model("contenttypes", "ContentType")
    types = content_type.objects.using(schema_editor.connection.alias)
    for model in MOVED:
        # A content type the target app already has (a post_migrate signal ran in between)
        # is kept, and the source's is left as it is rather than clash with it.
        if not types.filter(app_label=target, model=model).exists():
            types.filter(app_label=source, model=model).update(app_label=target)


def move_content_types_back(apps, schema_editor):
    move_content_types(apps, schema_editor, source="tenancy", target="runtime")


def rename_like_indexes(apps, schema_editor, source="runtime", target="tenancy"):
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    for model, column in LIKE_INDEXED:
        old = schema_editor._create_index_name(f"{source}_{model}", [column], suffix="_like")
        new = schema_editor._create_index_name(f"{target}_{model}", [column], suffix="_like")
        schema_editor.execute(f"ALTER INDEX IF EXISTS {quote(old)} RENAME TO {quote(new)}")


def rename_like_indexes_back(apps, schema_editor):
    rename_like_indexes(apps, schema_editor, source="tenancy", target="runtime")


class Migration(migrations.Migration):

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("runtime", "0005_tenant_and_apikey_move_to_tenancy"),
        ("tenancy", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelTable(name="tenant", table=None),
        migrations.AlterModelTable(name="apikey", table=None),
        migrations.RunPython(rename_like_indexes, rename_like_indexes_back),
        migrations.RunPython(move_content_types, move_content_types_back),
    ]
