"""The webhook's own CA and serving certificate: what they are, when to renew, what to trust.

Called by `rotator.CertRotator` on every pass; tests call it directly with a fixed clock.
Pure: no I/O, no Kubernetes client. The certificates live in one Secret of the release
namespace (`to_secret_data` / `from_secret_data` are its layout); the API server trusts the
CA through the webhook configuration's caBundle (`WebhookCerts.bundle`).

Renewal is decided at a fraction of each certificate's life (2/3 by default), long before it
expires, so a controller that was down for days still renews in time. When the CA itself is
renewed, the previous CA stays in the caBundle until it expires: replicas that still serve a
certificate it signed stay trusted while they switch over.
"""

from __future__ import annotations

import base64
import datetime as dt
import enum
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_CERT_KEY",
    "CA_KEY_KEY",
    "PREVIOUS_CA_KEY",
    "TLS_CERT_KEY",
    "TLS_KEY_KEY",
    "CertPolicy",
    "KeyPair",
    "Renewal",
    "WebhookCerts",
    "issue",
    "renewal_due",
    "signed_by_bundle",
]

# The Secret's keys: tls.crt/tls.key as in a kubernetes.io/tls Secret, the CA beside them.
CA_CERT_KEY: Final = "ca.crt"
CA_KEY_KEY: Final = "ca.key"
TLS_CERT_KEY: Final = "tls.crt"
TLS_KEY_KEY: Final = "tls.key"
PREVIOUS_CA_KEY: Final = "ca-previous.crt"
# A certificate is valid from a little before it is made: clocks of the API server's hosts
# may lag ours.
_BACKDATE: Final = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class CertPolicy:
    """How long the CA and the serving certificate live, and when in that life to renew."""

    ca_validity: dt.timedelta = dt.timedelta(days=365)
    cert_validity: dt.timedelta = dt.timedelta(days=90)
    renew_fraction: float = 2 / 3

    def renew_at(self, cert: x509.Certificate) -> dt.datetime:
        start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
        return start + (end - start) * self.renew_fraction


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes


class Renewal(enum.Enum):
    """What a pass must write: nothing, a new serving certificate, or a new CA and one."""

    KEEP = "keep"
    SERVING = "serving"
    CA = "ca"


@dataclass(frozen=True)
class WebhookCerts:
    """The Secret's content: the signing CA, the serving pair, and the CA it replaced."""

    ca: KeyPair
    serving: KeyPair
    previous_ca_pem: bytes = b""

    def bundle(self, now: dt.datetime) -> bytes:
        """The caBundle: the current CA, then the previous one while it is still valid."""
        out = self.ca.cert_pem
        previous = _load_cert(self.previous_ca_pem)
        if previous is not None and previous.not_valid_after_utc > now:
            out += self.previous_ca_pem
        return out

    def to_secret_data(self) -> dict[str, str]:
        """The Secret's `data` (base64 values)."""
        raw = {
            CA_CERT_KEY: self.ca.cert_pem,
            CA_KEY_KEY: self.ca.key_pem,
            TLS_CERT_KEY: self.serving.cert_pem,
            TLS_KEY_KEY: self.serving.key_pem,
        }
        if self.previous_ca_pem:
            raw[PREVIOUS_CA_KEY] = self.previous_ca_pem
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> WebhookCerts | None:
        """The certificates in a Secret's `data`; None when it is empty (as the chart renders
        it) or not base64. A missing or unreadable part is kept empty, for `renewal_due` to
        renew: removing `ca.key` forces a CA renewal that keeps the old CA trusted meanwhile,
        removing `tls.crt` a serving renewal."""
        try:
            raw = {k: base64.b64decode(v, validate=True) for k, v in (data or {}).items()}
        except ValueError:
            return None
        if not any(raw.values()):
            return None
        return cls(
            KeyPair(raw.get(CA_CERT_KEY, b""), raw.get(CA_KEY_KEY, b"")),
            KeyPair(raw.get(TLS_CERT_KEY, b""), raw.get(TLS_KEY_KEY, b"")),
            raw.get(PREVIOUS_CA_KEY, b""),
        )


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_cert(pem: bytes) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(pem) if pem else None
    except ValueError:
        return None


def _load_key(pem: bytes) -> ec.EllipticCurvePrivateKey | None:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        return None
    return key if isinstance(key, ec.EllipticCurvePrivateKey) else None


def _same_public_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    form = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    return cert.public_key().public_bytes(encoding, form) == key.public_key().public_bytes(
        encoding, form
    )


def _names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _hosts_of(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(v) for v in san.get_values_for_type(x509.DNSName)} | {
        str(v) for v in san.get_values_for_type(x509.IPAddress)
    }


def _new_ca(common_name: str, policy: CertPolicy, now: dt.datetime) -> KeyPair:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    usage = x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=True,
        crl_sign=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + policy.ca_validity)
        # A CA that signs only leaf certificates: path length 0.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def _new_serving(
    ca: KeyPair, hosts: Sequence[str], policy: CertPolicy, now: dt.datetime
) -> KeyPair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = _load_key(ca.key_pem)
    if ca_key is None:
        raise ValueError("the CA key is not an EC private key")
    key = _key()
    # Never outlive the CA: a certificate its issuer no longer vouches for is refused anyway.
    not_after = min(now + policy.cert_validity, ca_cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def renewal_due(
    certs: WebhookCerts | None, hosts: Sequence[str], policy: CertPolicy, now: dt.datetime
) -> tuple[Renewal, str]:
    """What to renew now, and why (for the log). Pure: the table tests call it directly."""
    if certs is None:
        return Renewal.CA, "the Secret holds no complete certificate set"
    ca_cert, ca_key = _load_cert(certs.ca.cert_pem), _load_key(certs.ca.key_pem)
    if ca_cert is None or ca_key is None or not _same_public_key(ca_cert, ca_key):
        return Renewal.CA, "the CA certificate or key is unreadable or they do not match"
    if now >= policy.renew_at(ca_cert):
        return Renewal.CA, f"the CA reached its renewal time ({policy.renew_at(ca_cert)})"
    cert, key = _load_cert(certs.serving.cert_pem), _load_key(certs.serving.key_pem)
    if cert is None or key is None or not _same_public_key(cert, key):
        return Renewal.SERVING, "the serving certificate or key is unreadable or mismatched"
    if not signed_by_bundle(certs.serving.cert_pem, certs.ca.cert_pem):
        return Renewal.SERVING, "the serving certificate was not signed by the current CA"
    if _hosts_of(cert) != set(hosts):
        return Renewal.SERVING, f"the serving certificate names {sorted(_hosts_of(cert))}"
    if now >= policy.renew_at(cert):
        return (
            Renewal.SERVING,
            f"the serving certificate reached its renewal time ({policy.renew_at(cert)})",
        )
    return Renewal.KEEP, "current"


def issue(
    certs: WebhookCerts | None,
    renewal: Renewal,
    hosts: Sequence[str],
    policy: CertPolicy,
    now: dt.datetime,
    *,
    ca_name: str,
) -> WebhookCerts:
    """The certificates after `renewal`: `certs` itself for KEEP."""
    if renewal is Renewal.KEEP and certs is not None:
        return certs
    if renewal is Renewal.SERVING and certs is not None:
        return WebhookCerts(
            certs.ca, _new_serving(certs.ca, hosts, policy, now), certs.previous_ca_pem
        )
    ca = _new_ca(ca_name, policy, now)
    # Keep trusting the CA being replaced (if it is readable) while its certificates live.
    previous = certs.ca.cert_pem if certs is not None and _load_cert(certs.ca.cert_pem) else b""
    return WebhookCerts(ca, _new_serving(ca, hosts, policy, now), previous)


def signed_by_bundle(cert_pem: bytes, bundle_pem: bytes) -> bool:
    """True when a CA in `bundle_pem` signed the certificate `cert_pem` (a signature check:
    the API server verifies the chain the same way, names aside)."""
    cert = _load_cert(cert_pem)
    if cert is None or not bundle_pem:
        return False
    try:
        cas = x509.load_pem_x509_certificates(bundle_pem)
    except ValueError:
        return False
    for ca in cas:
        if ca.subject != cert.issuer:
            continue
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False
