"""`StackInventory`: the pools' stacks read straight from the state backend, no Pulumi CLI.

Called by the operator's commands that only read stacks (`atomic-gang pools`, and `drain`
while it waits for the stacks to go), which must run on a laptop where no Pulumi CLI is
installed: the CLI is the controller's tool for writing stacks, not the operator's for
looking at them. Both backends the product supports keep each stack as one JSON document
in the CLI's project-scoped layout, which is read here as the CLI would read it::

    file://<root>                   <root>/.pulumi/stacks/<project>/<stack>.json[.gz]
    s3://<bucket>/<prefix>?region=  <prefix>/.pulumi/stacks/<project>/<stack>.json[.gz]

with its lock objects under ``.pulumi/locks/organization/<project>/<stack>/``. The bucket
is reached as the CLI reaches it (``orphan_locks.s3_location``). Any other backend (Pulumi
Cloud, gs://, azblob://) is read only through the CLI: `inventory_for` answers None and
the caller says so. Reading needs no secrets (outputs are read from the checkpoint as
stored). Nothing here writes.
"""

from __future__ import annotations

import gzip
import json
import shlex
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from provisioner.api.settings import Settings
from provisioner.cloud.ec2api import state_bucket_client
from provisioner.cloud.statebucket import StateBucket
from provisioner.pulumi_driver import oplog
from provisioner.pulumi_driver.cli_env import StatePaths, aws_environment
from provisioner.pulumi_driver.orphan_locks import ObjectStore, s3_location
from provisioner.pulumi_driver.reports import StackSummary
from provisioner.pulumi_driver.statefile import FileBackend, file_backend_root
from stacks.outputs import OutputsError, PoolOutputs

__all__ = [
    "S3StateFiles",
    "StackInventory",
    "StateFiles",
    "inventory_for",
    "operator_command",
    "reads_without_cli",
]

_SUFFIXES = (".json", ".json.gz")


class StateFiles(Protocol):
    """One backend's stack documents and lock files, as `StackInventory` reads them."""

    def stack_names(self) -> list[str]: ...

    def checkpoint(self, stack: str) -> dict[str, Any] | None: ...

    def locked(self, stack: str) -> bool: ...

    def last_update(self, stack: str) -> datetime | None: ...


class _FileStateFiles:
    """A `file://` backend on this machine's disk (`statefile.FileBackend`)."""

    def __init__(self, backend: FileBackend) -> None:
        self._backend = backend

    def stack_names(self) -> list[str]:
        return self._backend.stack_names()

    def checkpoint(self, stack: str) -> dict[str, Any] | None:
        return self._backend.checkpoint(stack)

    def locked(self, stack: str) -> bool:
        return bool(self._backend.lock_holders(stack))

    def last_update(self, stack: str) -> datetime | None:
        return None


class S3StateFiles:
    """An `s3://` backend's objects, each stack document read once per listing."""

    def __init__(self, store: ObjectStore, prefix: str, project: str) -> None:
        self._store = store
        root = prefix.strip("/")
        pulumi = f"{root}/.pulumi" if root else ".pulumi"
        self._stacks = f"{pulumi}/stacks/{project}/"
        self._locks = f"{pulumi}/locks/organization/{project}/"
        self._keys: dict[str, str] | None = None
        self._read: dict[str, dict[str, Any] | None] = {}

    def _stack_keys(self) -> dict[str, str]:
        if self._keys is None:
            keys: dict[str, str] = {}
            for key in self._store.keys(self._stacks):
                name = key.removeprefix(self._stacks)
                for suffix in _SUFFIXES:
                    if "/" not in name and name.endswith(suffix):
                        keys.setdefault(name.removesuffix(suffix), key)
            self._keys = keys
        return self._keys

    def stack_names(self) -> list[str]:
        # Each listing reads the bucket again: `drain` asks until the last stack is gone, and
        # documents read for an earlier listing say nothing of the stacks destroyed since.
        self._keys = None
        self._read.clear()
        return sorted(self._stack_keys())

    def checkpoint(self, stack: str) -> dict[str, Any] | None:
        if stack not in self._read:
            key = self._stack_keys().get(stack)
            raw = self._store.read(key) if key is not None else None
            self._read[stack] = None if raw is None else _latest(raw, key or "")
        return self._read[stack]

    def locked(self, stack: str) -> bool:
        return any(k.endswith(".json") for k in self._store.keys(f"{self._locks}{stack}/"))

    def last_update(self, stack: str) -> datetime | None:
        return None


def _latest(raw: bytes, name: str) -> dict[str, Any] | None:
    """The document's latest deployment; None when it does not parse (as `statefile`)."""
    try:
        if name.endswith(".gz"):
            raw = gzip.decompress(raw)
        latest = json.loads(raw)["checkpoint"].get("latest")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return latest if isinstance(latest, dict) else {}


class StackInventory:
    """What `StackDriver` answers to `pools` (`list_stacks`, `outputs`, `last_operation`,
    `operator_command`), read without the CLI."""

    def __init__(
        self, files: StateFiles, settings: Settings, operations: oplog.OperationLog | None
    ) -> None:
        self._files = files
        self._settings = settings
        self._operations = operations

    def list_stacks(self) -> list[StackSummary]:
        summaries = []
        for name in self._files.stack_names():
            latest = self._files.checkpoint(name)
            summaries.append(
                StackSummary(
                    name=name,
                    resource_count=None if latest is None else len(latest.get("resources") or ()),
                    last_update=self._files.last_update(name),
                    locked=self._files.locked(name),
                    pending_operations=(
                        None if latest is None else len(latest.get("pending_operations") or ())
                    ),
                )
            )
        return summaries

    def outputs(self, pool: str) -> PoolOutputs | None:
        latest = self._files.checkpoint(pool)
        if latest is None:
            return None
        try:
            return PoolOutputs.from_state(latest)
        except OutputsError:
            return None  # never prepared, or not a pool's stack

    def last_operation(self, pool: str) -> oplog.StackOperation | None:
        """The controller's own record, when its state directory is this machine's."""
        return self._operations.last(pool) if self._operations is not None else None

    def operator_command(self) -> str:
        return operator_command(self._settings)


def operator_command(settings: Settings) -> str:
    """The exact command an operator runs to list every pool's stack with the Pulumi CLI."""
    backend = settings.pulumi.backend_url
    # Listing reads the bucket only: no KMS call, so only the S3 endpoint (if any).
    variables = {
        k: v
        for k, v in aws_environment(settings).items()
        if k == "AWS_ENDPOINT_URL_S3" and backend.startswith("s3://")
    }
    variables["PULUMI_BACKEND_URL"] = backend
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in variables.items())
    project = settings.pulumi.project_name
    return f"{assigns} pulumi stack ls --project {shlex.quote(project)}"


def reads_without_cli(settings: Settings) -> bool:
    """Whether the settings' backend is one this module reads (file:// or s3://)."""
    backend = settings.pulumi.backend_url
    return file_backend_root(backend) is not None or s3_location(settings) is not None


def inventory_for(settings: Settings, *, local_state: bool) -> StackInventory | str:
    """The settings' backend as an inventory, or the sentence saying why it cannot be read
    without the CLI. ``local_state``: the settings' state directory is this machine's (a
    settings file or flags), so the controller's operation records are read from it."""
    backend = settings.pulumi.backend_url
    paths = StatePaths(Path(settings.pulumi.state_dir))
    operations = oplog.OperationLog(paths.operations) if local_state else None
    project = settings.pulumi.project_name
    root = file_backend_root(backend)
    if root is not None:
        if not root.is_dir():
            return (
                f"the file:// backend {root} is not on this machine (it is the controller "
                "pod's disk): the stacks were not read"
            )
        return StackInventory(_FileStateFiles(FileBackend(root, project)), settings, operations)
    where = s3_location(settings)
    if where is None:
        return (
            f"the backend {backend} is read only through the Pulumi CLI: pass --pulumi-root "
            "DIR (or put pulumi on PATH) to list its stacks"
        )
    bucket = StateBucket(state_bucket_client(where.region, where.endpoint_url), where.bucket)
    return StackInventory(S3StateFiles(bucket, where.prefix, project), settings, operations)
