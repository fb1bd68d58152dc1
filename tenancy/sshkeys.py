"""OpenSSH public keys as tenants register them: parsed by `cryptography` (never a regular
expression), checked against the key policy, fingerprinted as `ssh-keygen -l` prints them.

Pure: no Django, no database. Policy (docs/architecture.md §11): Ed25519, ECDSA, or RSA of at
least 3072 and at most 16384 bits; DSA and short or oversized RSA are refused."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

MIN_RSA_BITS = 3072
# OpenSSH's own ceiling (SSHBUF_MAX_BIGNUM, ssh-keygen refuses more): a larger modulus only
# makes every handshake of the unit's sshd slower, and parses (a 60,000-bit key did).
MAX_RSA_BITS = 16384
MAX_TEXT = 16 * 1024  # an RSA 16384 key is under 3 KiB of text
MAX_COMMENT = 256


# Refused by name before parsing (cryptography would parse DSA, with a deprecation warning).
_REFUSED_TYPES = {"ssh-dss": "DSA"}


class KeyRefused(ValueError):
    """The text is not an acceptable OpenSSH public key; the message says why."""


@dataclass(frozen=True)
class PublicKey:
    """One parsed key: `openssh` is the canonical `<type> <base64>` line (comment dropped)."""

    kind: str  # ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa, ...
    bits: int
    openssh: str
    comment: str
    fingerprint: str  # SHA256:<base64 without padding>, as ssh-keygen -l shows it


def parse(text: str) -> PublicKey:
    """Parse one `authorized_keys`-style line (`<type> <base64> [comment]`)."""
    if not isinstance(text, str) or not text.strip():
        raise KeyRefused("publicKey is required: one line such as 'ssh-ed25519 AAAA... you@host'.")
    if len(text) > MAX_TEXT:
        raise KeyRefused(f"publicKey is longer than {MAX_TEXT} characters.")
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) != 1:
        raise KeyRefused("publicKey must be exactly one key on one line.")
    fields = lines[0].split(None, 2)
    if len(fields) < 2:
        raise KeyRefused("publicKey must be '<type> <base64 key> [comment]'.")
    comment = fields[2].strip() if len(fields) == 3 else ""
    if len(comment) > MAX_COMMENT or not comment.isprintable():
        raise KeyRefused(f"the key's comment must be printable, at most {MAX_COMMENT} characters.")
    if fields[0] in _REFUSED_TYPES:
        raise KeyRefused(f"{_REFUSED_TYPES[fields[0]]} keys are not accepted: use ed25519.")
    try:
        key = serialization.load_ssh_public_key(f"{fields[0]} {fields[1]}".encode("ascii"))
    except UnicodeEncodeError:
        raise KeyRefused("publicKey is not an OpenSSH public key (non-ASCII text).") from None
    except UnsupportedAlgorithm:
        raise KeyRefused(
            f"{fields[0][:40]!r} is not an accepted SSH key type: use ed25519, ECDSA or RSA."
        ) from None
    except ValueError:
        raise KeyRefused("publicKey is not an OpenSSH public key (it does not parse).") from None
    kind, bits = _check_policy(key)
    openssh = key.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode("ascii")
    blob = base64.b64decode(openssh.split()[1])
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")
    return PublicKey(
        kind=kind, bits=bits, openssh=openssh, comment=comment, fingerprint=f"SHA256:{digest}"
    )


def _check_policy(key: object) -> tuple[str, int]:
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "ssh-ed25519", 256
    if isinstance(key, ec.EllipticCurvePublicKey):
        return f"ecdsa-sha2-nistp{key.curve.key_size}", key.curve.key_size
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise KeyRefused(
                f"RSA keys need at least {MIN_RSA_BITS} bits; this one has {key.key_size}. "
                "Use ed25519 (ssh-keygen -t ed25519)."
            )
        if key.key_size > MAX_RSA_BITS:
            raise KeyRefused(
                f"RSA keys may have at most {MAX_RSA_BITS} bits; this one has {key.key_size}."
            )
        return "ssh-rsa", key.key_size
    raise KeyRefused("only ed25519, ECDSA and RSA keys are accepted.")
