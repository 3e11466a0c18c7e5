"""The certificate rotator against a stateful fake of its two Kubernetes objects, and the
webhook server hot-reloading what it writes."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from devenv.processes import free_port
from provisioner.api.settings import Settings
from provisioner.webhook.certs import CertPolicy, signed_by_bundle
from provisioner.webhook.rotator import CertRotator, StoredSecret
from provisioner.webhook.server import WebhookServer
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_cert_store import FakeCertStore
from tests.support.pools import pool_lookup

pytestmark = pytest.mark.unit

HOSTS = ("127.0.0.1",)
T0 = dt.datetime.now(dt.UTC)
DAY = dt.timedelta(days=1)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def rotator(store: FakeCertStore, directory: Path, clock: Clock, **kwargs: object) -> CertRotator:
    return CertRotator(
        store,
        hosts=HOSTS,
        policy=CertPolicy(),
        serve_dir=directory,
        ca_name="test-ca",
        clock=clock,
        **kwargs,  # type: ignore[arg-type]
    )


def test_the_first_pass_fills_the_empty_secret_sets_the_bundle_and_serves(tmp_path: Path) -> None:
    store, clock = FakeCertStore(), Clock()
    served: list[int] = []
    one = rotator(store, tmp_path, clock, on_new_pair=lambda: served.append(1))
    assert not one.trusts(None)
    one.sync()
    certs = store.certs()
    assert store.bundles == [certs.ca.cert_pem, certs.ca.cert_pem]
    assert one.cert_file.read_bytes() == certs.serving.cert_pem
    assert one.key_file.read_bytes() == certs.serving.key_pem
    assert one.key_file.stat().st_mode & 0o077 == 0
    assert served == [1] and one.trusts(certs.serving.cert_pem)
    # A second pass changes nothing.
    one.sync()
    assert (store.secret_writes, store.bundle_writes, served) == (1, 1, [1])


def test_replicas_racing_write_one_set_and_all_serve_it(tmp_path: Path) -> None:
    store, clock = FakeCertStore(), Clock()
    first, second = rotator(store, tmp_path / "a", clock), rotator(store, tmp_path / "b", clock)
    # Both read the empty Secret at the same version; the second's write is refused.
    stale = store.read_secret()
    first.sync()
    store.data_before = stale  # type: ignore[attr-defined]
    original_read = store.read_secret
    store.read_secret = lambda: stale  # type: ignore[method-assign]
    second.sync()  # generates, then loses the precondition
    store.read_secret = original_read  # type: ignore[method-assign]
    assert store.secret_writes == 1 and second.served is None
    second.sync()  # adopts the winner's set
    assert second.served == first.served == store.certs().serving


def test_a_reset_ca_bundle_is_restored_on_the_next_pass(tmp_path: Path) -> None:
    store, clock = FakeCertStore(), Clock()
    one = rotator(store, tmp_path, clock)
    one.sync()
    served = one.served
    assert served is not None
    store.bundles = [b"", store.bundles[1]]  # a GitOps sync wrote an empty caBundle
    one.sync()
    assert store.bundles == [store.certs().ca.cert_pem] * 2
    assert one.served == served and store.secret_writes == 1


def test_not_trusted_while_the_bundle_lacks_the_ca(tmp_path: Path) -> None:
    store, clock = FakeCertStore(), Clock()
    one = rotator(store, tmp_path, clock)
    one.sync()
    store.bundles = [b"", b""]
    store.conflict_next_bundle_write = True
    one.sync()  # could not patch: it must not report the certificate trusted
    assert not one.trusts(one.served.cert_pem if one.served else None)
    one.sync()
    assert one.trusts(one.served.cert_pem if one.served else None)


def test_serving_rotation_at_two_thirds_of_its_life(tmp_path: Path) -> None:
    store, clock = FakeCertStore(), Clock()
    one = rotator(store, tmp_path, clock)
    one.sync()
    old = store.certs()
    clock.now = T0 + 59 * DAY
    one.sync()
    assert store.certs() == old
    clock.now = T0 + 61 * DAY
    one.sync()
    new = store.certs()
    assert new.ca == old.ca and new.serving != old.serving
    assert one.served == new.serving and store.bundle_writes == 1  # the bundle did not change


def test_ca_rotation_switches_what_is_served_only_once_the_bundle_trusts_it(
    tmp_path: Path,
) -> None:
    store, clock = FakeCertStore(), Clock()
    one = rotator(store, tmp_path, clock)
    one.sync()
    old = store.certs()
    clock.now = T0 + 244 * DAY
    store.conflict_next_bundle_write = True
    one.sync()  # the Secret has the new CA; the configuration could not be patched yet
    new = store.certs()
    assert new.ca != old.ca and new.previous_ca_pem == old.ca.cert_pem
    assert one.served == old.serving  # still the certificate the API server trusts
    assert all(signed_by_bundle(old.serving.cert_pem, b) for b in store.bundles)
    one.sync()  # patches the bundle, and still serves the old pair this pass
    assert store.bundles == [new.ca.cert_pem + old.ca.cert_pem] * 2
    assert one.served == old.serving
    one.sync()  # reads the new bundle back: now the new pair is served
    assert one.served == new.serving


def test_a_failing_pass_is_retried_by_run(tmp_path: Path) -> None:
    store, clock = FakeCertStore(), Clock()
    failures = [LookupError("Secret atomic-gang/x does not exist")]
    original = store.read_secret

    def flaky() -> StoredSecret:
        if failures:
            raise failures.pop()
        return original()

    store.read_secret = flaky  # type: ignore[method-assign]
    stop = threading.Event()
    one = rotator(store, tmp_path, clock, check_interval=0.05, on_new_pair=stop.set)
    thread = threading.Thread(target=one.run, args=(stop,), daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive() and one.served == store.certs().serving


# -- the server hot-reloads the rotated pair ----------------------------------------------------
SETTINGS = Settings.model_validate(
    {
        "cluster_name": "demo",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {
            "region": "us-east-1",
            "node_role_arn": "arn:aws:iam::123456789012:role/eks-gang-node-role",
        },
    }
)


def presented(port: int) -> x509.Certificate:
    # The rotated certificate is dated by the test's clock, months ahead of the real one:
    # fetch it unverified, and check its signature against the bundle below.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


@pytest.fixture
def rotated_server(
    tmp_path: Path,
) -> Iterator[tuple[FakeCertStore, Clock, CertRotator, WebhookServer, int]]:
    store, clock = FakeCertStore(), Clock()
    one = rotator(store, tmp_path, clock)
    one.sync()
    port = free_port()
    server = WebhookServer(
        SETTINGS,
        one.cert_file,
        one.key_file,
        pools=pool_lookup(),
        host="127.0.0.1",
        port=port,
        reload_interval=0.05,
    )
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield store, clock, one, server, port
    server.stop()


def test_the_server_serves_the_rotated_pair_without_a_restart(rotated_server) -> None:  # type: ignore[no-untyped-def]
    store, clock, one, server, port = rotated_server
    first = store.certs()
    assert server.serving_cert_pem == first.serving.cert_pem
    assert one.trusts(server.serving_cert_pem)
    clock.now = T0 + 244 * DAY  # the CA is due: a new CA and serving certificate
    one.sync()
    one.sync()
    second = store.certs()
    assert second.ca != first.ca
    deadline = time.monotonic() + 10
    while server.serving_cert_pem != second.serving.cert_pem:
        assert time.monotonic() < deadline, "the server never reloaded the rotated pair"
        time.sleep(0.05)
    leaf = presented(port)
    assert leaf == x509.load_pem_x509_certificate(second.serving.cert_pem)
    assert signed_by_bundle(second.serving.cert_pem, store.bundles[0])
    assert one.trusts(server.serving_cert_pem)
