"""The self-managed ownership key (`provisioner.kube.ownership_key`): generated once into the
chart's empty Secret, the same key for every racing replica, never rewritten, and a clear
error, not a silently unsigned controller, when it cannot be had."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest

from provisioner.api.settings import Settings
from provisioner.assembly import read_ownership_key
from provisioner.cloud.naming import OWNERSHIP_KEY_MIN_BYTES
from provisioner.kube.errors import KubeConflict, KubeError, KubeForbidden, KubeNotFound
from provisioner.kube.ownership_key import (
    KubeOwnershipKeyStore,
    OwnershipKeyUnavailable,
    ensure_ownership_key,
)
from tests.support.fake_ownership_key_store import FakeOwnershipKeyStore

NAMESPACE, SECRET = "atomic-gang-system", "atomic-gang-provisioner-ownership-key"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def ensure(store: FakeOwnershipKeyStore) -> bytes:
    return ensure_ownership_key(store, min_bytes=OWNERSHIP_KEY_MIN_BYTES)


def test_an_empty_secret_gets_32_random_bytes_written_once() -> None:
    store = FakeOwnershipKeyStore()
    key = ensure(store)
    assert len(key) == 32
    assert store.writes == 1 and base64.b64decode(store.data["key"]) == key
    # The next start reads the same key and writes nothing.
    assert ensure(store) == key and store.writes == 1
    assert ensure(FakeOwnershipKeyStore()) != key  # random, not derived


def test_a_replica_that_loses_the_race_uses_the_winners_key() -> None:
    winner = bytes(range(32))
    store = FakeOwnershipKeyStore()
    store.racer_writes = {"key": b64(winner)}
    assert ensure(store) == winner
    assert store.writes == 0 and store.data == {"key": b64(winner)}


def test_an_existing_key_is_read_not_rewritten() -> None:
    existing = bytes(range(100, 148))
    store = FakeOwnershipKeyStore({"key": b64(existing), "note": "kept"})
    assert ensure(store) == existing
    assert store.writes == 0


@pytest.mark.parametrize("stored", [b64(b"x" * 31), "not base64!"])
def test_a_short_or_garbled_key_is_a_clear_error_not_replaced(stored: str) -> None:
    store = FakeOwnershipKeyStore({"key": stored})
    with pytest.raises(OwnershipKeyUnavailable) as err:
        ensure(store)
    message = str(err.value)
    assert FakeOwnershipKeyStore.name in message and "data.key" in message
    assert f"at least {OWNERSHIP_KEY_MIN_BYTES}" in message and "remove data.key" in message
    assert store.writes == 0 and store.data == {"key": stored}


# -- on the API server: one Secret, get and update ---------------------------------------------
class SecretServer:
    """`KubeClient.get`/`replace`/`with_timeout` on one Secret, with resourceVersions."""

    def __init__(self, *, exists: bool = True, fail: KubeError | None = None) -> None:
        self.secret: dict[str, Any] | None = (
            {
                "metadata": {
                    "name": SECRET,
                    "namespace": NAMESPACE,
                    "resourceVersion": "7",
                    "annotations": {"helm.sh/resource-policy": "keep"},
                }
            }
            if exists
            else None
        )
        self.fail = fail

    def with_timeout(self, _seconds: float) -> SecretServer:
        return self

    def get(self, _ref: Any, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        if self.fail is not None:
            raise self.fail
        if self.secret is None or (name, namespace) != (SECRET, NAMESPACE):
            raise KubeNotFound("not found", status=404)
        return self.secret

    def replace(self, _ref: Any, body: Mapping[str, Any]) -> dict[str, Any]:
        assert self.secret is not None
        version = self.secret["metadata"]["resourceVersion"]
        if body["metadata"]["resourceVersion"] != version:
            raise KubeConflict("conflict", status=409)
        self.secret = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": str(int(version) + 1)},
        }
        return self.secret


def settings(**ownership: Any) -> Settings:
    return Settings.model_validate(
        {
            "clusterName": "c1",
            "defaults": {
                "region": "us-east-1",
                "nodeRoleArn": "arn:aws:iam::123456789012:role/node",
            },
            "pulumi": {"ephemeralState": True},
            "ownership": ownership,
        }
    )


SELF_MANAGED = {"selfManaged": {"namespace": NAMESPACE, "secretName": SECRET}}


def test_the_controller_signs_with_the_key_it_keeps_in_the_secret() -> None:
    server = SecretServer()
    key = read_ownership_key(settings(**SELF_MANAGED), server)  # type: ignore[arg-type]
    assert key is not None
    assert server.secret is not None
    assert base64.b64decode(server.secret["data"]["key"]) == key.secret
    # Helm's annotations survive the replace, the keep policy among them.
    assert server.secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    again = read_ownership_key(settings(**SELF_MANAGED), server)  # type: ignore[arg-type]
    assert again == key


@pytest.mark.parametrize(
    ("server", "needle"),
    [
        (SecretServer(fail=KubeForbidden("forbidden", status=403)), "get and update"),
        (SecretServer(exists=False), "does not exist"),
    ],
)
def test_an_unreachable_secret_stops_the_start_naming_the_secret_and_rbac(
    server: SecretServer, needle: str
) -> None:
    with pytest.raises(OwnershipKeyUnavailable) as err:
        read_ownership_key(settings(**SELF_MANAGED), server)  # type: ignore[arg-type]
    message = str(err.value)
    assert f"{NAMESPACE}/{SECRET}" in message and needle in message
    if needle == "get and update":
        assert f"resourceNames [{SECRET}]" in message


def test_key_file_and_self_managed_are_mutually_exclusive() -> None:
    with pytest.raises(ValueError, match=r"ownership\.keyFile and ownership\.selfManaged"):
        settings(keyFile="/run/key", **SELF_MANAGED)


def test_the_kube_store_reports_a_lost_race_as_false() -> None:
    server = SecretServer()
    store = KubeOwnershipKeyStore(server, namespace=NAMESPACE, secret_name=SECRET)  # type: ignore[arg-type]
    stored = store.read()
    assert store.write({"key": b64(b"k" * 32)}, stored.resource_version)
    assert not store.write({"key": b64(b"j" * 32)}, stored.resource_version)
    assert server.secret is not None
    assert server.secret["data"] == {"key": b64(b"k" * 32)}
