"""The webhook certificate rotator's Kubernetes calls: one Secret, one webhook configuration.

Implements `provisioner.webhook.rotator.CertStore` for the controller command. Every call
names its object, so the chart grants these verbs with `resourceNames` to exactly these two
objects (get and update on the Secret, get and patch on the configuration) and nothing else:
the chart creates the Secret empty, so no create verb is needed.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeConflict, KubeInvalid, KubeNotFound
from provisioner.kube.resources import SECRETS, VALIDATING_WEBHOOKS
from provisioner.kube.secret_writes import replace_secret_data
from provisioner.webhook.rotator import StoredSecret

__all__ = ["KubeCertStore"]

# Our writes to the caBundle carry their own field manager, so a server-side-apply tool
# (Argo CD, Flux) sees that field owned by the controller, not by the release.
FIELD_MANAGER = "atomic-gang-webhook-certs"


def _decoded(value: Any) -> bytes:
    try:
        return base64.b64decode(str(value or ""), validate=True)
    except (binascii.Error, ValueError):
        return b""


class KubeCertStore:
    def __init__(
        self, kube: KubeClient, *, namespace: str, secret_name: str, webhook_configuration: str
    ) -> None:
        self._kube, self._namespace = kube, namespace
        self._secret, self._config = secret_name, webhook_configuration
        self._config_read: tuple[str, tuple[str, ...]] = ("", ())
        self._secret_metadata: dict[str, Any] = {}

    def read_secret(self) -> StoredSecret:
        try:
            body = self._kube.get(SECRETS, self._secret, namespace=self._namespace)
        except KubeNotFound as err:
            raise LookupError(
                f"Secret {self._namespace}/{self._secret} does not exist: the chart creates it "
                "empty (webhook.certMode=selfSigned); the controller may not create Secrets"
            ) from err
        meta = body.get("metadata") or {}
        self._secret_metadata = dict(meta)
        return StoredSecret(dict(body.get("data") or {}), str(meta.get("resourceVersion", "")))

    def write_secret(self, data: Mapping[str, str], resource_version: str) -> bool:
        return replace_secret_data(
            self._kube,
            namespace=self._namespace,
            name=self._secret,
            read_metadata=self._secret_metadata,
            data=data,
            resource_version=resource_version,
        )

    def read_ca_bundles(self) -> tuple[bytes, ...]:
        try:
            body = self._kube.get(VALIDATING_WEBHOOKS, self._config)
        except KubeNotFound as err:
            raise LookupError(
                f"ValidatingWebhookConfiguration {self._config} does not exist"
            ) from err
        hooks = body.get("webhooks") or []
        names = tuple(str(h.get("name", "")) for h in hooks)
        self._config_read = (str((body.get("metadata") or {}).get("resourceVersion", "")), names)
        return tuple(_decoded((h.get("clientConfig") or {}).get("caBundle")) for h in hooks)

    def write_ca_bundle(self, bundle: bytes) -> bool:
        resource_version, names = self._config_read
        encoded = base64.b64encode(bundle).decode()
        operations: list[dict[str, Any]] = []
        for index, name in enumerate(names):
            # Each webhook is named before it is changed: an index never lands on another.
            operations.append({"op": "test", "path": f"/webhooks/{index}/name", "value": name})
            operations.append(
                {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": encoded}
            )
        try:
            self._kube.json_patch(
                VALIDATING_WEBHOOKS,
                self._config,
                operations,
                resource_version=resource_version,
                field_manager=FIELD_MANAGER,
            )
        except (KubeConflict, KubeInvalid):
            return False
        return True
