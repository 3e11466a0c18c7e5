"""The webhook's own CA and serving certificate: generation, the renewal decision, trust."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from provisioner.webhook.certs import (
    CertPolicy,
    KeyPair,
    Renewal,
    WebhookCerts,
    issue,
    renewal_due,
    signed_by_bundle,
)

pytestmark = pytest.mark.unit

HOSTS = ("agp", "agp.ns", "agp.ns.svc", "agp.ns.svc.cluster.local")
POLICY = CertPolicy()  # 365-day CA, 90-day certificate, renewed at 2/3 of each life
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def fresh(now: dt.datetime = T0, hosts: tuple[str, ...] = HOSTS) -> WebhookCerts:
    return issue(None, Renewal.CA, hosts, POLICY, now, ca_name="test-ca")


def cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_a_new_set_is_a_ca_and_a_serving_certificate_it_signed() -> None:
    certs = fresh()
    ca, leaf = cert(certs.ca.cert_pem), cert(certs.serving.cert_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    leaf.verify_directly_issued_by(ca)
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == set(HOSTS)
    assert ca.not_valid_after_utc == T0 + POLICY.ca_validity
    assert leaf.not_valid_after_utc == T0 + POLICY.cert_validity
    assert certs.previous_ca_pem == b""
    assert renewal_due(certs, HOSTS, POLICY, T0) == (Renewal.KEEP, "current")


def test_an_ip_host_becomes_an_ip_san() -> None:
    leaf = cert(fresh(hosts=("127.0.0.1",)).serving.cert_pem)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert renewal_due(fresh(hosts=("127.0.0.1",)), ("127.0.0.1",), POLICY, T0)[0] is Renewal.KEEP


def test_the_secret_layout_round_trips() -> None:
    certs = issue(fresh(), Renewal.CA, HOSTS, POLICY, T0, ca_name="test-ca")
    data = certs.to_secret_data()
    assert set(data) == {"ca.crt", "ca.key", "tls.crt", "tls.key", "ca-previous.crt"}
    assert WebhookCerts.from_secret_data(data) == certs


@pytest.mark.parametrize(
    "data",
    [None, {}, {"ca.crt": "not base64!", "tls.crt": "eA=="}],
    ids=["no data", "empty (as the chart renders it)", "not base64"],
)
def test_an_empty_or_garbled_secret_holds_no_set(data: dict[str, str] | None) -> None:
    assert WebhookCerts.from_secret_data(data) is None
    assert renewal_due(None, HOSTS, POLICY, T0)[0] is Renewal.CA


def test_removing_the_ca_key_forces_a_ca_renewal_that_keeps_the_old_ca_trusted() -> None:
    certs = fresh()
    data = certs.to_secret_data()
    del data["ca.key"]
    damaged = WebhookCerts.from_secret_data(data)
    renewal, _ = renewal_due(damaged, HOSTS, POLICY, T0)
    assert renewal is Renewal.CA
    renewed = issue(damaged, renewal, HOSTS, POLICY, T0, ca_name="test-ca")
    assert renewed.previous_ca_pem == certs.ca.cert_pem
    assert signed_by_bundle(certs.serving.cert_pem, renewed.bundle(T0))


def test_removing_the_serving_certificate_forces_a_serving_renewal() -> None:
    certs = fresh()
    data = certs.to_secret_data()
    del data["tls.crt"]
    damaged = WebhookCerts.from_secret_data(data)
    renewal, _ = renewal_due(damaged, HOSTS, POLICY, T0)
    assert renewal is Renewal.SERVING
    assert issue(damaged, renewal, HOSTS, POLICY, T0, ca_name="test-ca").ca == certs.ca


def _other_ca_serving() -> KeyPair:
    return fresh().serving  # signed by a different CA than the set it is put in


CASES = [
    # (name, how the set is changed, now, expected renewal)
    ("fresh", lambda c: c, T0, Renewal.KEEP),
    ("serving before 2/3 of 90 days", lambda c: c, T0 + 59 * DAY, Renewal.KEEP),
    ("serving past 2/3 of 90 days", lambda c: c, T0 + 61 * DAY, Renewal.SERVING),
    ("serving expired", lambda c: c, T0 + 91 * DAY, Renewal.SERVING),
    ("CA past 2/3 of a year", lambda c: c, T0 + 244 * DAY, Renewal.CA),
    (
        "serving signed by another CA",
        lambda c: WebhookCerts(c.ca, _other_ca_serving()),
        T0,
        Renewal.SERVING,
    ),
    (
        "serving key of another certificate",
        lambda c: WebhookCerts(c.ca, KeyPair(c.serving.cert_pem, fresh().serving.key_pem)),
        T0,
        Renewal.SERVING,
    ),
    (
        "CA key of another CA",
        lambda c: WebhookCerts(KeyPair(c.ca.cert_pem, fresh().ca.key_pem), c.serving),
        T0,
        Renewal.CA,
    ),
    (
        "CA unreadable",
        lambda c: WebhookCerts(KeyPair(b"x", c.ca.key_pem), c.serving),
        T0,
        Renewal.CA,
    ),
]


@pytest.mark.parametrize(
    ("change", "now", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_renewal_decision(change, now: dt.datetime, expected: Renewal) -> None:  # type: ignore[no-untyped-def]
    renewal, why = renewal_due(change(fresh()), HOSTS, POLICY, now)
    assert renewal is expected, why


def test_changed_service_names_renew_the_serving_certificate() -> None:
    renewal, why = renewal_due(fresh(), (*HOSTS, "extra.ns.svc"), POLICY, T0)
    assert renewal is Renewal.SERVING and "names" in why


def test_renewing_the_serving_certificate_keeps_the_ca() -> None:
    certs = fresh()
    later = T0 + 61 * DAY
    renewed = issue(certs, Renewal.SERVING, HOSTS, POLICY, later, ca_name="test-ca")
    assert renewed.ca == certs.ca and renewed.serving != certs.serving
    assert renewal_due(renewed, HOSTS, POLICY, later)[0] is Renewal.KEEP
    assert renewed.bundle(later) == certs.bundle(later)


def test_a_new_ca_keeps_the_old_one_trusted_until_it_expires() -> None:
    certs = fresh()
    later = T0 + 244 * DAY
    renewed = issue(certs, Renewal.CA, HOSTS, POLICY, later, ca_name="test-ca")
    assert renewed.ca != certs.ca and renewed.previous_ca_pem == certs.ca.cert_pem
    bundle = renewed.bundle(later)
    # A replica still serving the old certificate is trusted, and so is the new one.
    assert signed_by_bundle(certs.serving.cert_pem, bundle)
    assert signed_by_bundle(renewed.serving.cert_pem, bundle)
    # Once the old CA expires it leaves the bundle.
    assert renewed.bundle(T0 + 366 * DAY) == renewed.ca.cert_pem


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    certs = fresh()
    # A serving renewal 300 days into the CA's life (a CA renewal that kept failing).
    late = issue(certs, Renewal.SERVING, HOSTS, POLICY, T0 + 300 * DAY, ca_name="test-ca")
    assert (
        cert(late.serving.cert_pem).not_valid_after_utc
        == cert(certs.ca.cert_pem).not_valid_after_utc
    )


def test_trust_is_a_signature_from_a_ca_in_the_bundle() -> None:
    ours, theirs = fresh(), fresh()
    assert signed_by_bundle(ours.serving.cert_pem, ours.ca.cert_pem)
    assert not signed_by_bundle(ours.serving.cert_pem, theirs.ca.cert_pem)
    assert signed_by_bundle(ours.serving.cert_pem, theirs.ca.cert_pem + ours.ca.cert_pem)
    assert not signed_by_bundle(ours.serving.cert_pem, b"")
    assert not signed_by_bundle(b"garbage", ours.ca.cert_pem)
    assert not signed_by_bundle(ours.serving.cert_pem, b"-----BEGIN CERTIFICATE-----\nxx\n")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"certValidity": "9000h", "caValidity": "8760h"}, "certValidity"),
        ({"checkInterval": "400h"}, "checkInterval"),
        ({"renewFraction": 1.0}, "renew_fraction"),
    ],
)
def test_settings_refuse_lifetimes_that_cannot_renew_in_time(
    values: dict[str, object], field: str
) -> None:
    from pydantic import ValidationError

    from provisioner.api.settings import SelfManagedCerts

    base = {"secretName": "s", "namespace": "n", "webhookConfiguration": "w", "hosts": ["h"]}
    with pytest.raises(ValidationError, match=field):
        SelfManagedCerts.model_validate({**base, **values})
