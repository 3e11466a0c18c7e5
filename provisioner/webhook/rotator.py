"""Keeps the webhook's self-managed certificate current, trusted, and served.

Runs on every replica (the webhook must serve before any leader is elected), started by the
controller command when `webhook.selfManaged` is set. Each pass, every `check_interval`:

1. Reads the Secret (release namespace, created empty by the chart). When the CA or the
   serving certificate is missing or due (`certs.renewal_due`), writes a new set,
   preconditioned on the resourceVersion it read: of replicas racing, one wins and the
   others get a conflict and adopt the winner's set on their next read. No lock, no leader.
2. Reads the webhook configuration; when any webhook's caBundle is not the Secret's
   (`WebhookCerts.bundle`), patches it. A GitOps sync or `kubectl apply` that resets the
   caBundle is undone within one interval.
3. Switches what this replica serves to the Secret's pair only once every webhook trusts its
   CA as read back on a pass after the patch, so a rotation never serves a certificate the
   API server cannot verify yet (the first pair, with nothing served before, at once).

What it watches (by polling, with get only): the Secret and the webhook configuration.
What it alone writes: the Secret's data and the configuration's caBundle fields.
Kubernetes is reached through `CertStore`; this module imports no Kubernetes client.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from provisioner.webhook.certs import (
    CertPolicy,
    KeyPair,
    Renewal,
    WebhookCerts,
    issue,
    renewal_due,
    signed_by_bundle,
)

__all__ = ["CertRotator", "CertStore", "StoredSecret"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredSecret:
    data: Mapping[str, str]
    resource_version: str


class CertStore(Protocol):
    """The Kubernetes calls the rotator makes (implemented in provisioner/kube)."""

    def read_secret(self) -> StoredSecret: ...

    def write_secret(self, data: Mapping[str, str], resource_version: str) -> bool:
        """Replace the Secret's data at `resource_version`; False when someone wrote since."""
        ...

    def read_ca_bundles(self) -> tuple[bytes, ...]:
        """Each webhook's caBundle (PEM; empty when unset), in the configuration's order."""
        ...

    def write_ca_bundle(self, bundle: bytes) -> bool:
        """Set every webhook's caBundle; False when the configuration changed since read."""
        ...


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class CertRotator:
    def __init__(
        self,
        store: CertStore,
        *,
        hosts: Sequence[str],
        policy: CertPolicy,
        serve_dir: Path,
        ca_name: str,
        check_interval: float = 10.0,
        clock: Callable[[], dt.datetime] = _utc_now,
        on_new_pair: Callable[[], None] | None = None,
    ) -> None:
        if not hosts:
            raise ValueError("the serving certificate needs at least one host name")
        self._store, self._hosts, self._policy = store, tuple(hosts), policy
        self._serve_dir, self._ca_name = serve_dir, ca_name
        self._interval, self._clock = check_interval, clock
        # Called after each new pair is written (the server is started on the first).
        self.on_new_pair = on_new_pair
        self._served: KeyPair | None = None
        self._bundles: tuple[bytes, ...] = ()
        self._lock = threading.Lock()

    @property
    def cert_file(self) -> Path:
        return self._serve_dir / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self._serve_dir / "tls.key"

    @property
    def served(self) -> KeyPair | None:
        """The pair last written for the server (None before the first)."""
        return self._served

    def trusts(self, cert_pem: bytes | None) -> bool:
        """True when every webhook's caBundle, as last read, holds the CA of `cert_pem`:
        the readiness rule (a replica is ready only if the API server can verify it)."""
        with self._lock:
            bundles = self._bundles
        return (
            bool(cert_pem)
            and bool(bundles)
            and all(signed_by_bundle(cert_pem or b"", b) for b in bundles)
        )

    def sync(self) -> None:
        """One pass: renew if due, correct the caBundle, serve the trusted pair.
        Raises the store's errors; `run` logs them and tries again next interval."""
        now = self._clock()
        stored = self._store.read_secret()
        certs = WebhookCerts.from_secret_data(stored.data)
        renewal, why = renewal_due(certs, self._hosts, self._policy, now)
        if renewal is not Renewal.KEEP:
            fresh = issue(certs, renewal, self._hosts, self._policy, now, ca_name=self._ca_name)
            if not self._store.write_secret(fresh.to_secret_data(), stored.resource_version):
                # Another replica renewed first; its set is read on the next pass.
                log.info("webhook certificate: another replica wrote the Secret first")
                return
            log.info("webhook certificate renewed (%s): %s", renewal.value, why)
            certs = fresh
        assert certs is not None  # renewal_due never keeps a missing set
        wanted = certs.bundle(now)
        bundles = self._store.read_ca_bundles()
        if not bundles:
            raise LookupError("the webhook configuration has no webhooks to give a caBundle")
        self._trusted(bundles)  # what the API server trusts now, until the patch lands
        if any(b != wanted for b in bundles):
            if not self._store.write_ca_bundle(wanted):
                log.info("webhook configuration changed while patching its caBundle; retrying")
                return
            log.info("webhook caBundle set to the Secret's CA (%d webhooks)", len(bundles))
            self._trusted(tuple(wanted for _ in bundles))
            if self._served is not None:
                # The API server loads a changed configuration a moment after the write:
                # keep serving the trusted pair until a later pass reads the new caBundle.
                return
            bundles = tuple(wanted for _ in bundles)
        if certs.serving != self._served and all(
            signed_by_bundle(certs.serving.cert_pem, b) for b in bundles
        ):
            self._write_pair(certs.serving)

    def _trusted(self, bundles: tuple[bytes, ...]) -> None:
        with self._lock:
            self._bundles = bundles

    def _write_pair(self, pair: KeyPair) -> None:
        # Each file is replaced whole (rename), so the server never reads half a file; a
        # cert and key from different sets fail to load together and the server keeps the
        # old pair until both are in place.
        self._serve_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for path, content in ((self.key_file, pair.key_pem), (self.cert_file, pair.cert_pem)):
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(content)
            os.replace(tmp, path)
        self._served = pair
        log.info("webhook serving certificate written to %s", self.cert_file)
        if self.on_new_pair is not None:
            self.on_new_pair()

    def run(self, stop: threading.Event) -> None:
        """Pass after pass until `stop` is set; an error waits one interval, then retries."""
        while not stop.is_set():
            try:
                self.sync()
            except Exception as err:  # any API failure: the next pass starts over
                log.warning("webhook certificate pass failed (retrying): %s", err)
            stop.wait(self._interval)
