from django.db import migrations


class Migration(migrations.Migration):
    """One name for the hash of an operation's canonical request: request_hash, as the GPUUnit's
    request-hash annotation and every caller already called it."""

    dependencies = [("runtime", "0011_gpuunit_match_attribute")]

    operations = [
        migrations.RenameField(model_name="operation", old_name="fingerprint", new_name="request_hash"),
    ]
