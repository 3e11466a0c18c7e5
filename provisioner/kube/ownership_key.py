"""The self-managed ownership key: one Secret the controller fills once and reads on start.

Read by `provisioner.assembly` before the engine and the reaper are built (settings
`ownership.selfManaged`). The chart renders the Secret empty and keeps it across an
uninstall (`helm.sh/resource-policy: keep`); the first replica to start writes 32 random
bytes under `key`, with a replace preconditioned on the resourceVersion it read, so
replicas racing on an empty Secret all end up with the one key that was written first.
Nothing ever rewrites a key that is there: instances signed with it must stay provable.

Every call names the Secret, so the chart grants get and update on that one object
(`resourceNames`) and no create.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeError, KubeForbidden, KubeNotFound
from provisioner.kube.resources import SECRETS
from provisioner.kube.secret_writes import replace_secret_data

__all__ = [
    "KEY_FIELD",
    "KubeOwnershipKeyStore",
    "OwnershipKeyStore",
    "OwnershipKeyUnavailable",
    "StoredKey",
    "ensure_ownership_key",
]

KEY_FIELD: Final = "key"
_GENERATED_BYTES: Final = 32
# Racing replicas converge after one lost write; more than a few means something else
# keeps rewriting the Secret.
_ATTEMPTS: Final = 5


class OwnershipKeyUnavailable(RuntimeError):
    """The self-managed key cannot be read, written or used; the message names the fix."""


@dataclass(frozen=True)
class StoredKey:
    data: Mapping[str, str]  # the Secret's data, base64 values as the API returns them
    resource_version: str


class OwnershipKeyStore(Protocol):
    """The two calls on the key's Secret (a fake in the unit tests)."""

    name: str  # namespace/name, for messages

    def read(self) -> StoredKey: ...

    def write(self, data: Mapping[str, str], resource_version: str) -> bool:
        """Replace the Secret's data if it is still at `resource_version`; False on 409."""
        ...


def ensure_ownership_key(store: OwnershipKeyStore, *, min_bytes: int) -> bytes:
    """The key in the store, generated and written first when there is none."""
    for attempt in range(_ATTEMPTS + 1):
        stored = store.read()
        encoded = stored.data.get(KEY_FIELD)
        if encoded:
            return _decoded(store.name, encoded, min_bytes)
        if attempt == _ATTEMPTS:
            break
        generated = base64.b64encode(secrets.token_bytes(_GENERATED_BYTES)).decode()
        # Won or lost, the next read returns the one key stored: a replica that lost the
        # race uses the winner's, never its own.
        store.write({**stored.data, KEY_FIELD: generated}, stored.resource_version)
    raise OwnershipKeyUnavailable(
        f"Secret {store.name} changed under every one of {_ATTEMPTS} attempts to write the "
        "ownership key; find what rewrites it (only the controller should)"
    )


def _decoded(name: str, encoded: str, min_bytes: int) -> bytes:
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) < min_bytes:
        raise OwnershipKeyUnavailable(
            f"Secret {name} data.{KEY_FIELD} holds {len(key)} bytes, the ownership key needs "
            f"at least {min_bytes} random bytes: remove data.{KEY_FIELD} and the controller "
            "generates one on its next start (instances launched under the old key are then "
            "reported, not reaped)"
        )
    return key


class KubeOwnershipKeyStore:
    """`OwnershipKeyStore` on the API server: get and update of one Secret."""

    def __init__(self, kube: KubeClient, *, namespace: str, secret_name: str) -> None:
        self._kube, self._namespace, self._secret = kube, namespace, secret_name
        self.name = f"{namespace}/{secret_name}"
        self._metadata: dict[str, Any] = {}

    def _failure(self, verb: str, err: KubeError) -> OwnershipKeyUnavailable:
        if isinstance(err, KubeNotFound):
            why = (
                "it does not exist: the chart creates it empty (ownership.keySecret unset), "
                "and the controller may not create Secrets"
            )
        elif isinstance(err, KubeForbidden):
            why = (
                "the controller's ServiceAccount needs a Role granting get and update on "
                f"secrets with resourceNames [{self._secret}] in {self._namespace} (the "
                "chart's -ownership-key Role)"
            )
        else:
            why = f"{err.message}; the controller retries when it restarts"
        return OwnershipKeyUnavailable(f"cannot {verb} the ownership key Secret {self.name}: {why}")

    def read(self) -> StoredKey:
        try:
            body = self._kube.get(SECRETS, self._secret, namespace=self._namespace)
        except KubeError as err:
            raise self._failure("read", err) from err
        self._metadata = dict(body.get("metadata") or {})
        return StoredKey(
            dict(body.get("data") or {}), str(self._metadata.get("resourceVersion", ""))
        )

    def write(self, data: Mapping[str, str], resource_version: str) -> bool:
        try:
            return replace_secret_data(
                self._kube,
                namespace=self._namespace,
                name=self._secret,
                read_metadata=self._metadata,
                data=data,
                resource_version=resource_version,
            )
        except KubeError as err:
            raise self._failure("write", err) from err
