"""A stateful fake of the ownership key's Secret (`OwnershipKeyStore`), with resourceVersions
and a racing replica, as the API server would hold it."""

from __future__ import annotations

from collections.abc import Mapping

from provisioner.kube.ownership_key import StoredKey


class FakeOwnershipKeyStore:
    name = "atomic-gang-system/atomic-gang-provisioner-ownership-key"

    def __init__(self, data: Mapping[str, str] | None = None) -> None:
        self.data: dict[str, str] = dict(data or {})
        self.version = 1
        self.reads = 0
        self.writes = 0
        # Data another replica writes between our read and our write (our write then 409s).
        self.racer_writes: dict[str, str] | None = None

    def read(self) -> StoredKey:
        self.reads += 1
        return StoredKey(dict(self.data), str(self.version))

    def write(self, data: Mapping[str, str], resource_version: str) -> bool:
        if self.racer_writes is not None:
            self.data, self.version = self.racer_writes, self.version + 1
            self.racer_writes = None
        if resource_version != str(self.version):
            return False
        self.data, self.version = dict(data), self.version + 1
        self.writes += 1
        return True
