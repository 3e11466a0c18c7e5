"""`PrepareIntents`: the spec of a first prepare in flight, kept in the state backend beside
the stack, so that what an interrupted first prepare made can be found again.

Used by the stack driver (``driver``). A prepare of a stack that holds no outputs yet (a new
stack, or one whose first `up` never completed) writes the stack's state once, at its end
(the CLI's `PULUMI_SKIP_CHECKPOINTS`, ``sdk``): about half the state-bucket requests of the
pool's first prepare, which is on every cold start's path. With checkpoints, a crash in
that `up` left pending creates behind, and recovery adopted what they made (``pending``);
without them the state stays as it was before the `up`. So, before the `up`, the driver
marks the intent here (`mark`: one object, the spec) and clears it once the `up` has
succeeded (`clear`); a failed `up` still writes what it made, and its intent stays until a
later prepare succeeds. While an intent stands and the stack has no outputs:

- the pool still exists: its next prepare runs the same `up`, and every pool resource
  adopts what an earlier create of the same name made (``stacks``: names are derived from
  cluster and pool);
- the pool is deleted: the destroy first runs that `up` with the intent's spec (`spec`),
  adopting what exists, then destroys the stack, so nothing the interrupted prepare made
  outlives the pool; if that `up` fails in a way that passes with time, the destroy fails
  with it and is tried again.

The intent lives in the backend, not the controller's state directory, because another
replica may be the one that recovers: under ``<prefix>/.pulumi/`` on S3 (where the
controller's state grants already reach, ``iam_state``; through the driver's S3 fence, so a
replica that lost the Lease writes none), and under the same path of a `file://` backend.
Pulumi reads nothing there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

from provisioner.api.settings import Settings
from provisioner.cloud.ec2api import state_bucket_client
from provisioner.cloud.errors import CloudError
from provisioner.cloud.statebucket import StateBucket
from provisioner.pulumi_driver.errors import StackError, state_backend_failure
from provisioner.pulumi_driver.orphan_locks import s3_location
from provisioner.pulumi_driver.statefile import FileBackend
from stacks.spec import PoolSpec

__all__ = ["INTENTS_DIR", "PrepareIntents", "prepare_intents_for"]

T = TypeVar("T")

# Beside Pulumi's own directories under `.pulumi/`, in a name the CLI does not use.
INTENTS_DIR = "atomic-gang-prepares"


class _Store(Protocol):
    def write(self, key: str, body: bytes) -> None: ...

    def read(self, key: str) -> bytes | None: ...

    def delete(self, key: str) -> None: ...


class _FileStore:
    def write(self, key: str, body: bytes) -> None:
        path = Path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_bytes(body)
        partial.replace(path)  # whole or not at all

    def read(self, key: str) -> bytes | None:
        try:
            return Path(key).read_bytes()
        except FileNotFoundError:
            return None

    def delete(self, key: str) -> None:
        Path(key).unlink(missing_ok=True)


class PrepareIntents:
    """``store`` None: a backend with nowhere to keep an intent, whose first prepares keep
    their checkpoints (`enabled` False; every call does nothing)."""

    def __init__(self, store: _Store | None, directory: str = "") -> None:
        self._store = store
        self._directory = directory.rstrip("/")

    @property
    def enabled(self) -> bool:
        return self._store is not None

    def key(self, pool: str) -> str:
        return f"{self._directory}/{pool}.json"

    def mark(self, spec: PoolSpec) -> None:
        """Before a first prepare's `up`: what it is about to make."""
        if self._store is not None:
            store = self._store
            self._call(spec.pool, "written", lambda key: store.write(key, _encode(spec)))

    def unfinished(self, pool: str, outputs: object | None) -> PoolSpec | None:
        """The spec of the pool's first prepare that has not succeeded, while its stack
        holds no ``outputs``; else None."""
        if self._store is None or outputs is not None:
            return None
        raw = self._call(pool, "read", self._store.read)
        return None if raw is None else PoolSpec.from_dict(json.loads(raw))

    def finish(self, spec: PoolSpec, up: Callable[[], object], log: logging.Logger) -> None:
        """Before a destroy: the interrupted first prepare's `up` (``up``, with the intent's
        ``spec``) again, so that what it made is adopted into the state and the destroy
        deletes it; it succeeded, so the intent goes, as after a prepare.

        If it fails, the engine did not reach the resources that depend on the one that
        failed, and what the interrupted prepare made of them is in no state. A failure
        that passes with time (throttling, AWS's own errors, the backend out of reach) is
        raised as the destroy's, the intent kept: the deletion is retried and runs this
        again. Any other (a refusal, a spec AWS no longer takes) is not waited on, or a
        pool whose first prepare was refused could never be deleted; the destroy deletes
        what the state holds (all a refused `up` made, as its state is written when it
        fails) and the log says so."""
        try:
            up()
        except StackError as err:
            if err.retryable:
                raise StackError(
                    err.reason,
                    f"Before destroying pool {spec.pool}'s stack, its first prepare, "
                    "interrupted earlier, was run again to take into the state what it made, "
                    "and failed; the destroy waits for it, so nothing is left outside the "
                    f"state: {err.message}",
                    kind=err.kind,
                    pool=spec.pool,
                    operation="destroy",
                ) from err
            log.warning(
                "stack %s: its interrupted first prepare, run again before the destroy, "
                "failed (%s, %s); destroying what the state holds",
                spec.pool,
                err.reason,
                err.kind.value,
                extra={"pool": spec.pool, "stack_operation": "destroy"},
            )
            return
        self.clear(spec.pool)

    def clear(self, pool: str) -> None:
        """The first prepare succeeded, or the stack is gone: nothing left to find."""
        if self._store is not None:
            self._call(pool, "deleted", self._store.delete)

    def _call(self, pool: str, verb: str, body: Callable[[str], T]) -> T:
        key = self.key(pool)
        try:
            return body(key)
        except (CloudError, OSError) as err:
            raise state_backend_failure(
                err,
                f"The prepare intent of pool {pool} ({key}) could not be {verb}: {err}",
                pool=pool,
                operation="prepare",
            ) from err


def _encode(spec: PoolSpec) -> bytes:
    return json.dumps(spec.to_dict(), sort_keys=True).encode()


def prepare_intents_for(
    settings: Settings, file_backend: FileBackend | None, endpoint_url: str | None
) -> PrepareIntents:
    """The intents of the settings' backend; disabled for a backend that is neither a file
    nor S3 (its first prepares keep their checkpoints). ``endpoint_url``: the driver's S3
    fence, so the controller's own writes are fenced like the CLI's."""
    project = settings.pulumi.project_name
    if file_backend is not None:
        directory = file_backend.root / ".pulumi" / INTENTS_DIR / project
        return PrepareIntents(_FileStore(), str(directory))
    where = s3_location(settings)
    if where is None:
        return PrepareIntents(None)
    bucket = StateBucket(
        state_bucket_client(where.region, endpoint_url or where.endpoint_url), where.bucket
    )
    prefix = f"{where.prefix}/.pulumi" if where.prefix else ".pulumi"
    return PrepareIntents(bucket, f"{prefix}/{INTENTS_DIR}/{project}")
