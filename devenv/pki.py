"""Certificates for the local control plane: one CA, serving certs, client certs, SA keys.

Used by `controlplane.py` (apiserver serving cert, admin client cert, service-account key
pair), `kueue.py` (the Kueue webhook's serving cert) and the webhook tests. Everything lives
only as long as the environment's work directory; nothing here is meant for production.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=30)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, cert_name: str, key_name: str) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / cert_name, directory / key_name
        cert_path.write_bytes(self.cert_pem)
        key_path.write_bytes(self.key_pem)
        key_path.chmod(0o600)
        return cert_path, key_path


class CertificateAuthority:
    """A throwaway CA that signs serving and client certificates."""

    def __init__(self, common_name: str = "atomic-gang-local-ca") -> None:
        self._key = _key()
        now = dt.datetime.now(dt.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._name = name
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
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
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def _issue(
        self,
        common_name: str,
        organizations: tuple[str, ...],
        usage: x509.ObjectIdentifier,
        hosts: tuple[str, ...] = (),
    ) -> KeyPair:
        key = _key()
        now = dt.datetime.now(dt.UTC)
        subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))

    def serving(self, *hosts: str) -> KeyPair:
        return self._issue(hosts[0], (), ExtendedKeyUsageOID.SERVER_AUTH, hosts)

    def client(self, user: str, *groups: str) -> KeyPair:
        return self._issue(user, groups, ExtendedKeyUsageOID.CLIENT_AUTH)


def service_account_keys() -> KeyPair:
    """The key pair the apiserver signs and verifies service-account tokens with."""
    key = _key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _pem_key(key))
