"""API shapes of what a tenant owns besides units: its SSH keys."""

from __future__ import annotations

from rest_framework import serializers

from controlplane.api.fields import StrictSerializer, StringField
from tenancy import sshkeys
from tenancy.models import SSHKey


class CreateSSHKeySerializer(StrictSerializer):
    """Register a public key once; units with `ssh.enabled` get it (or the ones they name)."""

    name = StringField(max_length=63, help_text="a DNS label naming the key, e.g. laptop")
    publicKey = StringField(
        max_length=sshkeys.MAX_TEXT,
        trim_whitespace=False,
        help_text="one OpenSSH public key line: ed25519, ECDSA or RSA of at least 3072 bits",
    )


class SSHKeySerializer(serializers.ModelSerializer):
    publicKey = serializers.CharField(source="public_key")
    createdAt = serializers.DateTimeField(source="created_at")

    class Meta:
        model = SSHKey
        fields = ["name", "kind", "bits", "fingerprint", "comment", "publicKey", "createdAt"]
