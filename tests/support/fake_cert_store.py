"""A stateful fake of the certificate rotator's two Kubernetes objects (`CertStore`)."""

from __future__ import annotations

from collections.abc import Mapping

from provisioner.webhook.certs import WebhookCerts
from provisioner.webhook.rotator import StoredSecret


class FakeCertStore:
    """The Secret and a two-webhook configuration, with resourceVersions and injected
    conflicts, as the API server would hold them."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.data: dict[str, str] = {}
        self.secret_version = 1
        self.bundles: list[bytes] = [b"", b""]
        self.secret_writes = 0
        self.bundle_writes = 0
        self.conflict_next_secret_write = False
        self.conflict_next_bundle_write = False

    def read_secret(self) -> StoredSecret:
        return StoredSecret(dict(self.data), str(self.secret_version))

    def write_secret(self, data: Mapping[str, str], resource_version: str) -> bool:
        if self.conflict_next_secret_write or resource_version != str(self.secret_version):
            self.conflict_next_secret_write = False
            return False
        self.data, self.secret_version = dict(data), self.secret_version + 1
        self.secret_writes += 1
        return True

    def read_ca_bundles(self) -> tuple[bytes, ...]:
        return tuple(self.bundles)

    def write_ca_bundle(self, bundle: bytes) -> bool:
        if self.conflict_next_bundle_write:
            self.conflict_next_bundle_write = False
            return False
        self.bundles = [bundle for _ in self.bundles]
        self.bundle_writes += 1
        return True

    def certs(self) -> WebhookCerts:
        certs = WebhookCerts.from_secret_data(self.data)
        assert certs is not None
        return certs
