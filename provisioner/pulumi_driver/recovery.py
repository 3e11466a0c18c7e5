"""`StackRecovery`: stale locks and interrupted operations of the pool stacks.

Owned by `StackDriver` (``driver``): its `recover()` calls `recover` for every stack of the
project on becoming leader, and each of its operations that meets a lock calls
`clear_stale_lock`. Pulumi's own stack lock is broken only when its holder cannot still be
writing (``locks.is_stale``): the driver hands over `rule`, read afresh at each decision —
no lock while this replica holds no valid fencing token; a lock of this host only when its
pid is dead; a lock of another host only once that host's fence has certainly closed. A
lock whose holder may be alive stays, and the stack is reported with its live holders (the
reconciler's next operation meets the lock again and asks again). Locks are read from the
backend's lock files on both backends (``orphan_locks``), never cancelled blind. A marker
without a result becomes an ``aborted`` record (``oplog``), and pending
operations are resolved, adopting what a crashed create made (``pending``). The
interrupted operation is never re-run: the reconciler asks again from its own state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from pulumi import automation as auto

from provisioner.api.settings import Settings
from provisioner.pulumi_driver import oplog
from provisioner.pulumi_driver.engine_log import EngineLog
from provisioner.pulumi_driver.locks import BreakRule, LockHolder, holders_from_message, is_stale
from provisioner.pulumi_driver.orphan_locks import LockFiles, lock_files_for, remove_stale
from provisioner.pulumi_driver.pending import Resolution, resolve
from provisioner.pulumi_driver.reports import RecoveryReport
from provisioner.pulumi_driver.sdk import noop_program
from provisioner.pulumi_driver.stack_backend import StackBackend
from stacks.adoption import find_created

__all__ = ["Runner", "StackRecovery"]

T = TypeVar("T")


class Runner(Protocol):
    """The driver's way to run an operation on a pool's stack: marked before, recorded
    after, a failure raised as `StackError` (``StackDriver._run``)."""

    def __call__(
        self, pool: str, operation: str, body: Callable[[EngineLog], T]
    ) -> tuple[T, oplog.StackOperation]: ...


class StackRecovery:
    def __init__(
        self,
        backend: StackBackend,
        operations: oplog.OperationLog,
        settings: Settings,
        log: logging.Logger,
    ) -> None:
        self._backend = backend
        self._oplog = operations
        self._settings = settings
        self._log = log
        # What this replica may break now (``locks.BreakRule``); the driver's, once leading.
        self.rule: Callable[[], BreakRule] = BreakRule.not_leading
        # Where the controller's own S3 calls go (the driver's S3 fence), when not S3 itself.
        self.endpoint_url: str | None = None
        self._lock_files: LockFiles | None = None  # made on first use

    def clear_stale_lock(self, pool: str, message: str) -> bool:
        """Our own operation on ``pool`` met a lock: it goes only if every holder is stale
        (``locks.is_stale``)."""
        holders = self._holders(pool, message)
        if not holders:
            return True  # released since: the operation may try again
        if not all(self._stale(h) for h in holders):
            return False
        self._cancel(pool, holders)
        return True

    def recover(self, pool: str, run: Runner) -> RecoveryReport:
        """Repair one stack; the caller holds the pool's lock."""
        files = self._backend.file
        aborted = self._oplog.abort_unfinished(pool)
        cancelled = False
        holders = self._holders(pool)
        live = [h for h in holders if not self._stale(h)]
        if live:
            return RecoveryReport(
                pool, aborted, live_lock_holders=tuple(h.describe() for h in live)
            )
        if holders:
            self._cancel(pool, holders)
            cancelled = True
        pending = files.pending_operations(pool) if files is not None else None
        resolutions: list[Resolution] = []
        refreshed = False
        if pending is None or pending:
            resolutions, refreshed = self._resolve_pending(pool, run)
        self._backend.drop_outputs(pool)
        return RecoveryReport(
            pool,
            aborted,
            lock_cancelled=cancelled,
            resolutions=tuple(resolutions),
            refreshed=refreshed,
        )

    def _holders(self, pool: str, message: str = "") -> list[LockHolder]:
        """The holders the backend's lock files name (the message's, for a backend whose
        files the driver cannot read)."""
        files = self._files()
        if files is not None:
            return [lock.holder for lock in files.list(pool)]
        return holders_from_message(message)

    def _stale(self, holder: LockHolder) -> bool:
        return is_stale(holder, self.rule())

    def _files(self) -> LockFiles | None:
        if self._lock_files is None:
            self._lock_files = lock_files_for(self._settings, self._backend.file, self.endpoint_url)
        return self._lock_files

    def _cancel(self, pool: str, holders: Sequence[LockHolder]) -> None:
        self._log.warning(
            "stack %s: cancelling stale lock held by %s",
            pool,
            ", ".join(h.describe() for h in holders) or "a process that recorded no marker",
            extra={"pool": pool, "stack_operation": "recover"},
        )
        self._backend.forget_listing()  # a failed `stack init` may or may not have left it
        if not self._backend.exists(pool):
            # A `stack init` that failed after writing its lock (``orphan_locks``): there is
            # no stack for `pulumi cancel` to load, so the lock files go one by one.
            self._remove_orphan_locks(pool)
            return
        self._backend.stack(pool).cancel()

    def _remove_orphan_locks(self, pool: str) -> None:
        files = self._files()
        if files is not None:
            removal = remove_stale(files, pool, self.rule)
            self._log.warning(
                "stack %s does not exist: removed %d lock file(s) of stale holders, kept %d",
                pool,
                len(removal.removed),
                len(removal.kept),
                extra={"pool": pool, "stack_operation": "recover"},
            )

    def _resolve_pending(self, pool: str, run: Runner) -> tuple[list[Resolution], bool]:
        def body(events: EngineLog) -> tuple[list[Resolution], bool]:
            stack = self._backend.stack(pool)
            exported = stack.export_stack()
            deployment = exported.deployment or {}
            if not deployment.get("pending_operations"):
                return [], False
            edited, resolutions = resolve(deployment, find_created)
            stack.import_stack(auto.Deployment(version=exported.version, deployment=edited))
            refresh = any(r.action == "refresh" for r in resolutions)
            if refresh:
                with stack.answering_from(events):
                    stack.refresh(program=noop_program, **events.reporting())
            return resolutions, refresh

        value, _ = run(pool, "recover", body)
        return value
