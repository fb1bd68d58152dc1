"""The development cluster's keys and certificates: one CA, the API server's serving
certificate for loopback, a client certificate the API server shows the KWOK kubelet, and the
ServiceAccount token signing key. Made once per cluster folder and kept with it, so a
kubeconfig written before a restart still trusts the server after it."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The in-cluster names of the API server, and its Service's first address (the service
# range the API server is given starts at 10.96.0.0).
SERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
SERVER_ADDRESSES = ("127.0.0.1", "10.96.0.1")
VALID_FOR = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class Pki:
    folder: Path

    @property
    def ca_cert(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.folder / "apiserver.crt"

    @property
    def server_key(self) -> Path:
        return self.folder / "apiserver.key"

    @property
    def client_cert(self) -> Path:
        return self.folder / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"

    @property
    def service_account_key(self) -> Path:
        return self.folder / "sa.key"

    @property
    def service_account_pub(self) -> Path:
        return self.folder / "sa.pub"


def ensure(folder: Path, *, host: str = "127.0.0.1") -> Pki:
    """The cluster's PKI in `folder`, made on first use (again if the API server's certificate
    does not name `host`, the name clients reach it by)."""
    pki = Pki(folder)
    names = folder / "server-names"
    if pki.service_account_pub.exists() and names.exists() and names.read_text() == host:
        return pki
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-control-plane-dev-ca")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_cert(pki.ca_cert, ca)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (
        _builder(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
            ca_name,
            server_key.public_key(),
        )
        .add_extension(
            x509.SubjectAlternativeName(_names(host)),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_cert(pki.server_cert, server)
    _write_key(pki.server_key, server_key)
    # What the API server shows the KWOK "kubelet" when it reads logs (kwok serves that
    # endpoint with this pair too).
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = (
        _builder(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-kubelet-client"),
                ]
            ),
            ca_name,
            client_key.public_key(),
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_cert(pki.client_cert, client)
    _write_key(pki.client_key, client_key)
    sa_key = ec.generate_private_key(ec.SECP256R1())
    _write_key(pki.service_account_key, sa_key)
    pki.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    names.write_text(host)  # written last: its presence says the folder is complete
    return pki


def _names(host: str) -> list[x509.GeneralName]:
    addresses = set(SERVER_ADDRESSES)
    dns = set(SERVER_NAMES)
    try:
        addresses.add(str(ipaddress.ip_address(host)))
    except ValueError:
        dns.add(host)
    return [x509.DNSName(n) for n in sorted(dns)] + [
        x509.IPAddress(ipaddress.ip_address(a)) for a in sorted(addresses)
    ]


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALID_FOR)
    )


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
