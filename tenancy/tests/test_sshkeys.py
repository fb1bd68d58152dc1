"""SSH public keys: parsed and fingerprinted with `cryptography` (pure), and the /ssh-keys API
(register, list, one, remove; bad input a 400 naming the field; duplicates 409)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tenancy import sshkeys
from tenancy.models import SSHKey
from tenancy.tests.factories import TenantFactory
from tests.endpoints import EndpointTest, client_for

# Made with ssh-keygen; the fingerprints are what `ssh-keygen -lf` printed for them.
ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILSkOgILcqVAoeUWHkkxaz7JUr1aw5d3hCpJKnzFcYWi alice@laptop"
)
ED25519_FP = "SHA256:MAv2xM1sbJjIkbpYS+7dDL8OKPvqSk8n+idVjtMPcL4"
ECDSA384 = (
    "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBGB/KHj/2ffVVyNDrV97"
    "+I4/vPEKNqbMp9LnjuIsQXzpDOc+Odd2S5XWz0Ns4jI5WdwUPMt1/BoWZwSMxSfv73QeCISKAIJ3fs3p049qvHoZL7f"
    "h1nAqOo+ExB9732zG/Q== bob"
)
ECDSA384_FP = "SHA256:w8kyQOyOX9obq3r4iqqLTq/Q30eWkbzC/SB24N0woJk"
RSA1024 = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDP9xE0OCdUKHZraIfZrfnj9p7lt9HmGJzC0UZSbpvT+P/EQWjQMvPp"
    "kM9Ehq6Fx7xCkgo5JS37QWVQwlO0uT7/h8QIa0k/KJno6M2ZioWT1IebpsvsVH0AILzdM5G5mnqNxUgN4cgy8sqh9ss3"
    "1uzrr/ljyk7sSYKZkZilCmrTtw== old"
)


def openssh(public_key) -> str:
    return public_key.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()


@pytest.mark.parametrize(
    ("text", "kind", "bits", "fingerprint", "comment"),
    [
        (ED25519, "ssh-ed25519", 256, ED25519_FP, "alice@laptop"),
        (ECDSA384, "ecdsa-sha2-nistp384", 384, ECDSA384_FP, "bob"),
        (f"  {ED25519}\n", "ssh-ed25519", 256, ED25519_FP, "alice@laptop"),
    ],
)
def test_keys_parse_with_ssh_keygen_s_fingerprint(text, kind, bits, fingerprint, comment):
    key = sshkeys.parse(text)
    assert (key.kind, key.bits, key.fingerprint, key.comment) == (kind, bits, fingerprint, comment)
    assert key.openssh == " ".join(text.split()[:2])


def test_rsa_of_3072_bits_is_accepted():
    key = rsa.generate_private_key(public_exponent=65537, key_size=3072).public_key()
    assert sshkeys.parse(openssh(key)).bits == 3072


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "required"),
        (RSA1024, "at least 3072 bits; this one has 1024"),
        ("ssh-ed25519 AAAAnotbase64!!", "does not parse"),
        ("ssh-ed25519", "<type> <base64 key>"),
        (f"{ED25519}\n{ECDSA384}", "exactly one key"),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILSkOgILcqVAoeUWHkkxaz7JUr1aw5d3hCpJKnzFcYWi é", ""),
        ("-----BEGIN PUBLIC KEY----- x", "not an accepted SSH key type"),
    ],
)
def test_what_is_not_an_acceptable_key_is_refused(text, says):
    if says == "":  # a comment that is printable, not ASCII: accepted
        assert sshkeys.parse(text).comment == "é"
        return
    with pytest.raises(sshkeys.KeyRefused, match=says):
        sshkeys.parse(text)


def _rsa_of(bits: int) -> str:
    """An OpenSSH RSA public key line with a `bits`-bit modulus (not a product of two primes:
    generating a real one this large takes minutes, and the policy reads only its size)."""
    modulus = (1 << (bits - 1)) | 1
    key = rsa.RSAPublicNumbers(65537, modulus).public_key()
    return key.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()


RSA_3072 = _rsa_of(3072)


def test_rsa_keys_over_16384_bits_are_refused_and_16384_accepted():
    assert sshkeys.parse(_rsa_of(16384)).bits == 16384
    for bits in (16385, 60000):
        with pytest.raises(sshkeys.KeyRefused, match="at most 16384 bits"):
            sshkeys.parse(_rsa_of(bits))


def test_dsa_keys_are_refused():
    with pytest.raises(sshkeys.KeyRefused, match="DSA keys are not accepted"):
        sshkeys.parse("ssh-dss AAAAB3NzaC1kc3MAAACBAP1/U4EddRIpUt9KnC7s5Of2EbdSPO9EAMMeP4C2 old")


def test_every_ecdsa_curve_is_named_by_its_size():
    for curve, size in ((ec.SECP256R1(), 256), (ec.SECP521R1(), 521)):
        key = ec.generate_private_key(curve).public_key()
        assert sshkeys.parse(openssh(key)).kind == f"ecdsa-sha2-nistp{size}"


def test_the_same_key_with_another_comment_has_the_same_fingerprint():
    other = ed25519.Ed25519PrivateKey.generate().public_key()
    assert (
        sshkeys.parse(openssh(other) + " a").fingerprint
        == sshkeys.parse(openssh(other)).fingerprint
    )


@pytest.mark.django_db
class TestSSHKeyCreate(EndpointTest):
    method = "post"
    path = "/api/v1/ssh-keys"

    def test_registers_and_shows_the_fingerprint(self, auth_client, tenant):
        data = self.get_success_response(
            auth_client, data={"name": "Laptop", "publicKey": ED25519}, status=201
        ).json()["data"]
        assert data["name"] == "laptop"
        assert data["fingerprint"] == ED25519_FP
        assert data["publicKey"] == " ".join(ED25519.split()[:2])
        assert SSHKey.objects.get(tenant=tenant).comment == "alice@laptop"

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"name": "laptop", "publicKey": RSA1024}, "publicKey"),
            ({"name": "laptop", "publicKey": "nope"}, "publicKey"),
            ({"name": "not a label", "publicKey": ED25519}, "name"),
            ({"name": 7, "publicKey": ED25519}, "name"),
            ({"name": "laptop"}, "publicKey"),
            ({"name": "laptop", "publicKey": ED25519, "extra": 1}, "extra"),
        ],
    )
    def test_bad_input_is_400_naming_the_field(self, auth_client, body, field):
        error = self.get_error_response(auth_client, data=body, status=400, code="invalid_request")
        assert field in error["details"]["fields"]
        assert not SSHKey.objects.exists()

    def test_a_name_or_key_registered_twice_is_409(self, auth_client):
        self.get_success_response(auth_client, data={"name": "a", "publicKey": ED25519}, status=201)
        error = self.get_error_response(
            auth_client,
            data={"name": "a", "publicKey": ECDSA384},
            status=409,
            code="ssh_key_conflict",
        )
        assert "named a" in error["message"]
        error = self.get_error_response(
            auth_client,
            data={"name": "b", "publicKey": ED25519},
            status=409,
            code="ssh_key_conflict",
        )
        assert "already registered as a" in error["message"]
        assert SSHKey.objects.count() == 1

    def test_another_tenant_may_register_the_same_key(self, auth_client):
        self.get_success_response(auth_client, data={"name": "a", "publicKey": ED25519}, status=201)
        other = client_for(TenantFactory())
        self.get_success_response(other, data={"name": "a", "publicKey": ED25519}, status=201)

    def test_statements_are_the_baseline(self, auth_client):
        auth_client.get("/api/v1/ssh-keys")  # warm the key's last-used stamp
        self.assert_statement_count(auth_client, data={"name": "a", "publicKey": ED25519})

    def test_a_tenant_s_keys_are_capped_with_limit_exceeded(self, auth_client, settings):
        settings.SSH_KEYS_PER_TENANT = 2
        for name, key in (("a", ED25519), ("b", ECDSA384)):
            self.get_success_response(
                auth_client, data={"name": name, "publicKey": key}, status=201
            )
        error = self.get_error_response(
            auth_client,
            data={"name": "c", "publicKey": RSA_3072},
            status=409,
            code="limit_exceeded",
        )
        assert error["details"] == {"limit": "sshKeys", "used": 2, "hard": 2}
        assert SSHKey.objects.count() == 2
        quota = auth_client.get("/api/v1/quota").json()["data"]["limits"]["sshKeys"]  # shown
        assert quota == {"hard": "2", "used": "2", "free": "0"}
        assert auth_client.delete("/api/v1/ssh-keys/a").status_code == 204
        self.get_success_response(
            auth_client, data={"name": "c", "publicKey": RSA_3072}, status=201
        )


@pytest.mark.django_db
class TestSSHKeyList(EndpointTest):
    path = "/api/v1/ssh-keys"

    def test_lists_only_the_tenant_s_keys_by_name(self, auth_client, tenant):
        auth_client.post(self.path, {"name": "zed", "publicKey": ED25519}, format="json")
        auth_client.post(self.path, {"name": "amy", "publicKey": ECDSA384}, format="json")
        client_for(TenantFactory()).post(
            self.path, {"name": "x", "publicKey": ED25519}, format="json"
        )
        names = [k["name"] for k in self.get_success_response(auth_client).json()["data"]]
        assert names == ["amy", "zed"]

    def test_statements_are_the_baseline(self, auth_client):
        auth_client.get(self.path)
        self.assert_statement_count(auth_client)

    def test_pages_by_name_with_a_cursor(self, auth_client):
        for name, key in (("c", ED25519), ("a", ECDSA384), ("b", RSA_3072)):
            auth_client.post(self.path, {"name": name, "publicKey": key}, format="json")
        first = self.get_success_response(auth_client, query={"limit": 2}).json()
        assert [k["name"] for k in first["data"]] == ["a", "b"]
        second = self.get_success_response(
            auth_client, query={"limit": 2, "cursor": first["meta"]["nextCursor"]}
        ).json()
        assert [k["name"] for k in second["data"]] == ["c"]
        assert second["meta"]["nextCursor"] is None
        other = client_for(TenantFactory())
        self.get_error_response(
            other, status=400, code="invalid_request", query={"cursor": first["meta"]["nextCursor"]}
        )
        self.get_error_response(auth_client, status=400, code="invalid_request", query={"limit": 0})


@pytest.mark.django_db
class TestSSHKeyDetail(EndpointTest):
    path = "/api/v1/ssh-keys/{name}"

    def test_one_key_and_404_for_another_tenant_s(self, auth_client):
        auth_client.post("/api/v1/ssh-keys", {"name": "a", "publicKey": ED25519}, format="json")
        assert self.get_success_response(auth_client, name="A").json()["data"]["name"] == "a"
        other = client_for(TenantFactory())
        self.get_error_response(other, status=404, code="not_found", name="a")

    def test_statements_are_the_baseline(self, auth_client):
        auth_client.post("/api/v1/ssh-keys", {"name": "a", "publicKey": ED25519}, format="json")
        self.assert_statement_count(auth_client, name="a")


@pytest.mark.django_db
class TestSSHKeyDelete(EndpointTest):
    method = "delete"
    path = "/api/v1/ssh-keys/{name}"

    def test_removes_it_then_404(self, auth_client):
        auth_client.post("/api/v1/ssh-keys", {"name": "a", "publicKey": ED25519}, format="json")
        response = self.call(auth_client, name="a")
        assert response.status_code == 204
        assert response.content == b""
        self.get_error_response(auth_client, status=404, code="not_found", name="a")
        assert not SSHKey.objects.exists()

    def test_statements_are_the_baseline(self, auth_client):
        auth_client.post("/api/v1/ssh-keys", {"name": "a", "publicKey": ED25519}, format="json")
        self.assert_statement_count(auth_client, name="a")
