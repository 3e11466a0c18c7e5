"""The lock files of a stack the backend does not hold, removed straight from the backend.

Called by the stack driver when an operation it runs while leading meets a lock it may
break (``locks.is_stale``) on a stack that does not exist. A `stack init` leaves such a lock
when it fails after writing it: on S3, the lock object was stored and the answer lost, so
the CLI gave up without creating the stack and without removing the lock. `pulumi cancel`
cannot remove it (it loads the stack first, and there is none), and every later `stack
init` of the pool meets it. So the driver deletes the lock files itself, as `pulumi cancel`
would, but one at a time: a file whose holder is not stale stays.

Both backends the product supports, in the CLI's project-scoped layout::

    file://<root>                   <root>/.pulumi/locks/organization/<project>/<stack>/*.json
    s3://<bucket>/<prefix>?region=  <prefix>/.pulumi/locks/organization/<project>/<stack>/*.json

The bucket is reached as the CLI reaches it (``cli_env``): the controller's credentials,
the URL's region (else the process's, else the controller's) and the ``aws.endpointUrl``
override. An S3 failure leaves as a `StackError` of the `CloudError`'s kind.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, urlparse

from provisioner.api.settings import Settings
from provisioner.cloud.ec2api import state_bucket_client
from provisioner.cloud.errors import CloudError
from provisioner.cloud.statebucket import StateBucket
from provisioner.pulumi_driver.errors import state_backend_failure
from provisioner.pulumi_driver.locks import BreakRule, LockHolder, holder_from_json, is_stale
from provisioner.pulumi_driver.statefile import FileBackend

__all__ = [
    "FileLockFiles",
    "LockFile",
    "LockFiles",
    "Removal",
    "S3Location",
    "S3LockFiles",
    "lock_files_for",
    "remove_stale",
    "s3_location",
]


@dataclass(frozen=True)
class LockFile:
    key: str  # a path (file://) or an object key (s3://)
    holder: LockHolder


class LockFiles(Protocol):
    def list(self, stack: str) -> list[LockFile]: ...

    def delete(self, lock: LockFile) -> None: ...


class ObjectStore(Protocol):
    """What `provisioner.cloud.statebucket.StateBucket` offers."""

    def keys(self, prefix: str) -> list[str]: ...

    def read(self, key: str) -> bytes | None: ...

    def delete(self, key: str) -> None: ...


class FileLockFiles:
    def __init__(self, backend: FileBackend) -> None:
        self._backend = backend

    def list(self, stack: str) -> list[LockFile]:
        directory = self._backend.lock_dir(stack)
        if not directory.is_dir():
            return []
        found = []
        for path in sorted(directory.glob("*.json")):
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                continue  # removed since the listing
            except OSError:
                raw = b""
            found.append(LockFile(str(path), holder_from_json(raw)))
        return found

    def delete(self, lock: LockFile) -> None:
        Path(lock.key).unlink(missing_ok=True)


class S3LockFiles:
    def __init__(self, store: ObjectStore, prefix: str, project: str) -> None:
        self._store = store
        root = prefix.strip("/")
        self._locks = f"{root}/.pulumi/locks" if root else ".pulumi/locks"
        self._project = project

    def lock_prefix(self, stack: str) -> str:
        return f"{self._locks}/organization/{self._project}/{stack}/"

    def list(self, stack: str) -> list[LockFile]:
        found = []
        for key in self._store.keys(self.lock_prefix(stack)):
            if not key.endswith(".json"):
                continue
            raw = self._store.read(key)
            if raw is not None:  # None: removed since the listing
                found.append(LockFile(key, holder_from_json(raw)))
        return found

    def delete(self, lock: LockFile) -> None:
        self._store.delete(lock.key)


@dataclass(frozen=True)
class Removal:
    removed: tuple[LockHolder, ...] = ()
    kept: tuple[LockHolder, ...] = ()  # holders that are not stale


def remove_stale(locks: LockFiles, stack: str, rule: Callable[[], BreakRule]) -> Removal:
    """Delete ``stack``'s lock files whose holder is stale; keep every other one."""
    removed: list[LockHolder] = []
    kept: list[LockHolder] = []
    try:
        for lock in locks.list(stack):
            # The rule is read again before each delete: the fence may close meanwhile.
            if is_stale(lock.holder, rule()):
                locks.delete(lock)
                removed.append(lock.holder)
            else:
                kept.append(lock.holder)
    except CloudError as err:
        raise state_backend_failure(
            err,
            f"The lock of stack {stack}, left by a stack init that failed, could not be "
            f"removed: {err.message}",
        ) from err
    return Removal(tuple(removed), tuple(kept))


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str
    region: str
    endpoint_url: str | None


def s3_location(settings: Settings) -> S3Location | None:
    """Where an ``s3://`` backend is and how the CLI reaches it (module docstring)."""
    url = urlparse(settings.pulumi.backend_url)
    if url.scheme != "s3":
        return None
    query = parse_qs(url.query)
    region = (
        _first(query, "region")
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or settings.defaults.region
    )
    endpoint = _first(query, "endpoint") or settings.aws.endpoint_url
    return S3Location(url.netloc, url.path.strip("/"), region, endpoint or None)


def lock_files_for(
    settings: Settings, file_backend: FileBackend | None, endpoint_url: str | None = None
) -> LockFiles | None:
    """The lock files of the settings' backend; None for a backend that is neither.
    ``endpoint_url``: reach the bucket there instead (the driver's S3 fence, so that the
    controller's own deletes of lock objects are fenced like the CLI's writes)."""
    if file_backend is not None:
        return FileLockFiles(file_backend)
    where = s3_location(settings)
    if where is None:
        return None
    client = state_bucket_client(where.region, endpoint_url or where.endpoint_url)
    return S3LockFiles(
        StateBucket(client, where.bucket), where.prefix, settings.pulumi.project_name
    )


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None
