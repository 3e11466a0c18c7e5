"""`StackDriver`: the only component that runs Pulumi stack operations (DESIGN §2, §5).

The GangNodePool reconciler owns one driver and calls it for the pool's stack: `prepare`
(launch template, instance profile, access entry, placement group), `record_instance_set`
after a launch, `remove_instance_set` before a re-acquire, `destroy` as the release, and
`outputs` on the warm path. On becoming leader it calls `recover()` before any of those.
`atomic-gang pools` uses `list_stacks`, `outputs` and `last_operation`.

Rules it keeps:
- One project per cluster, one stack per pool (stack name = pool name), one work dir per
  stack, one shared `PulumiCommand` (the CLI's version is checked once).
- One operation per stack at a time: a lock per stack in this process. Across processes
  the leader Lease keeps one active controller, and Pulumi's own stack lock is broken only
  by the leader (``locks.is_stale``): `recover()` marks this driver leading and clears
  every lock it finds, at once; `step_down()` marks it not leading, after which it breaks
  none (a standby never touches the live leader's lock).
- Every operation is marked before and recorded after (``oplog``); `recover()` turns a
  marker without a result into an ``aborted`` record, cancels stale locks, and resolves
  pending operations (adopting what a crashed create made, ``pending``). It never re-runs
  the interrupted operation: the reconciler asks again from its own state.
- Engine events stream into the controller's log (``engine_log``); failures become `StackError`
  with a named reason (``errors``).
- The warm path does not start the CLI: `outputs` answers from memory, then from the state
  file of a `file://` backend, and only then asks the CLI.
- Engine runs share one provider host process (``provider_host``) unless
  ``stackOperations.providerHost`` is ``perOperation``.
- An operation starts as few CLI processes as it can (``sdk``): an `up` is one, a new stack
  adds its `stack init`, a destroy is one (`destroy --remove`). Whether a stack exists is
  read from the backend (the state files, or one `stack ls` of the project remembered until
  `recover()` or `read_outputs()` looks again), never learned from a failing `stack select`;
  the outputs come from the update's own engine events.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pulumi import automation as auto

from provisioner.api.constants import FailureKind
from provisioner.api.settings import Settings
from provisioner.pulumi_driver import oplog
from provisioner.pulumi_driver.cli_env import (
    StatePaths,
    aws_environment,
    cli_environment,
    secrets_problem,
)
from provisioner.pulumi_driver.engine_log import EngineLog
from provisioner.pulumi_driver.errors import (
    CLI_UNAVAILABLE,
    POOL_NOT_PREPARED,
    STACK_NOT_FOUND,
    StackError,
    classify,
    is_locked,
)
from provisioner.pulumi_driver.locks import LockHolder, holders_from_message, is_stale
from provisioner.pulumi_driver.orphan_locks import LockFiles, lock_files_for, remove_stale
from provisioner.pulumi_driver.pending import Resolution, resolve
from provisioner.pulumi_driver.provider_host import SharedProviderHost
from provisioner.pulumi_driver.sdk import PoolStack, PoolWorkspace
from provisioner.pulumi_driver.statefile import FileBackend, file_backend_root
from stacks.adoption import find_created
from stacks.outputs import OutputsError, PoolOutputs
from stacks.pool_program import RESOURCE_NAMES, pool_program
from stacks.spec import InstanceSetRecord, PoolSpec

__all__ = ["RecoveryReport", "StackDriver", "StackResult", "StackSummary"]

T = TypeVar("T")


def _reporting_to(events: EngineLog) -> dict[str, Any]:
    """How every engine run reports: its events to the engine log, no colour, no progress."""
    return {
        "on_event": events.on_event,
        "on_output": events.on_output,
        "on_error": events.on_error,
        "color": "never",
        "suppress_progress": True,
    }


def _noop_program() -> None:
    """Destroy and refresh read the state, not the program; an inline no-op keeps the CLI
    from looking for a Python language plugin it does not need."""


@dataclass(frozen=True)
class StackResult:
    """An operation that left the stack holding ``outputs``."""

    operation: oplog.StackOperation
    outputs: PoolOutputs
    changes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RecoveryReport:
    pool: str
    aborted: oplog.StackOperation | None = None
    lock_cancelled: bool = False
    live_lock_holders: tuple[str, ...] = ()
    resolutions: tuple[Resolution, ...] = ()
    refreshed: bool = False

    @property
    def deferred(self) -> bool:
        """True when a live process holds the lock: recovery must wait for it."""
        return bool(self.live_lock_holders)

    @property
    def clean(self) -> bool:
        return not (self.aborted or self.lock_cancelled or self.resolutions or self.deferred)


@dataclass(frozen=True)
class StackSummary:
    name: str
    resource_count: int | None
    last_update: datetime | None
    locked: bool
    pending_operations: int | None


class StackDriver:
    def __init__(
        self,
        settings: Settings,
        pulumi_root: Path,
        log: logging.Logger,
    ) -> None:
        self._settings = settings
        self._log = log
        self._leading = False
        self._paths = StatePaths(Path(settings.pulumi.state_dir))
        self.project = settings.pulumi.project_name
        self.backend_url = settings.pulumi.backend_url
        self._env = cli_environment(settings, Path(pulumi_root), self._paths)
        root = file_backend_root(self.backend_url)
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        self._file = FileBackend(root, self.project) if root is not None else None
        self._paths.home.mkdir(parents=True, exist_ok=True)
        self._oplog = oplog.OperationLog(self._paths.operations)
        try:
            self._command = auto.PulumiCommand(root=str(pulumi_root))
        except (OSError, subprocess.CalledProcessError, auto.InvalidVersionError) as exc:
            raise StackError(
                CLI_UNAVAILABLE,
                f"The Pulumi CLI under {pulumi_root} does not run or is too old ({exc}).",
                kind=FailureKind.CONFIG,
            ) from exc
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._stacks: dict[str, PoolStack] = {}
        # The project's stacks on a non-file backend, where asking costs a CLI run: one
        # `stack ls`, then kept up to date by this driver's own creates and destroys (only
        # this driver creates stacks while it leads). recover() and read_outputs() list again.
        self._known: set[str] | None = None
        self._outputs: dict[str, PoolOutputs] = {}
        self._lock_files: LockFiles | None = None  # made on first use: rarely needed
        # Every workspace holds `self._env` itself (not a copy), so the attach variable set
        # here before each engine run reaches every stack's next CLI process.
        self._provider_host = (
            SharedProviderHost(self._env, log)
            if settings.stack_operations.provider_host == "shared"
            else None
        )

    @property
    def provider_host_pid(self) -> int | None:
        """The shared provider host's process while it runs (for benchmarks and tests)."""
        return self._provider_host.pid if self._provider_host is not None else None

    def close(self) -> None:
        """Stop the shared provider host (the controller is shutting down)."""
        if self._provider_host is not None:
            self._provider_host.close()

    # --- reads (no CLI on the warm path) ---------------------------------------------------
    def outputs(self, pool: str) -> PoolOutputs | None:
        """The pool's stack outputs, or None when the pool has no prepared stack."""
        cached = self._outputs.get(pool)
        if cached is not None:
            return cached
        if self._file is not None:
            # The state file is replaced whole, so it can be read while an update runs.
            latest = self._file.checkpoint(pool)
            if latest is not None:
                return _parse_state(latest)
        with self._lock(pool):
            return self._current(pool)

    def read_outputs(self, pool: str) -> PoolOutputs | None:
        """The outputs as the backend holds them now, not as this driver last saw them: for
        observers of stacks another process writes (a standby, the inventory, a test)."""
        with self._lock(pool):
            self._outputs.pop(pool, None)
            self._known = None
            return self._current(pool)

    def needs_prepare(self, spec: PoolSpec) -> bool:
        """False when the stack already holds exactly ``spec``: the warm path may launch
        from the recorded launch template without an `up`."""
        current = self.outputs(spec.pool)
        return current is None or current.spec != spec

    def last_operation(self, pool: str) -> oplog.StackOperation | None:
        return self._oplog.last(pool)

    def list_stacks(self) -> list[StackSummary]:
        """Every stack of the project (every pool, including ones whose GangNodePool is gone)."""
        if self._file is not None:
            backend = self._file
            summaries = []
            for name in backend.stack_names():
                pending = backend.pending_operations(name)
                summaries.append(
                    StackSummary(
                        name=name,
                        resource_count=backend.resource_count(name),
                        last_update=_mtime(backend.stacks_dir / f"{name}.json"),
                        locked=bool(backend.lock_holders(name)),
                        pending_operations=None if pending is None else len(pending),
                    )
                )
            return summaries
        workspace = self._workspace(self._paths.project_workspace)
        summaries = [
            StackSummary(
                name=s.name.rsplit("/", 1)[-1],
                resource_count=s.resource_count,
                last_update=s.last_update,
                locked=bool(s.update_in_progress),
                pending_operations=None,
            )
            for s in workspace.list_stacks()
        ]
        self._known = {s.name for s in summaries}
        return summaries

    def operator_command(self) -> str:
        """The exact command an operator runs to list every pool's stack."""
        # Listing reads the bucket only: no KMS call, so only the S3 endpoint (if any).
        variables = {
            k: v
            for k, v in aws_environment(self._settings).items()
            if k == "AWS_ENDPOINT_URL_S3" and self.backend_url.startswith("s3://")
        }
        variables["PULUMI_BACKEND_URL"] = self.backend_url
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in variables.items())
        return f"{assigns} pulumi stack ls --project {shlex.quote(self.project)}"

    # --- operations ------------------------------------------------------------------------
    def prepare(self, spec: PoolSpec) -> StackResult:
        """Create or update the pool's infrastructure; a recorded gang stays recorded."""
        with self._lock(spec.pool):
            current = self._current(spec.pool)
            return self._up(spec, current.record if current else None, "prepare")

    def record_instance_set(
        self, pool: str, group: str, instance_ids: Sequence[str]
    ) -> StackResult:
        """Record the gang the engine launched; its ids become the `instanceIds` output."""
        record = InstanceSetRecord(group, tuple(instance_ids))
        with self._lock(pool):
            return self._up(self._prepared(pool, "record").spec, record, "record")

    def remove_instance_set(self, pool: str) -> StackResult:
        """Release the recorded gang (terminate, clean ENIs) and keep the pool's template."""
        with self._lock(pool):
            return self._up(self._prepared(pool, "remove").spec, None, "remove")

    def destroy(self, pool: str) -> oplog.StackOperation:
        """Release everything the pool owns, then remove its stack (gone from `stack ls`)."""
        with self._lock(pool):
            if not self._exists(pool):
                self._forget(pool)
                op = self._oplog.begin(pool, "destroy")
                return self._oplog.finish(op, oplog.SUCCEEDED, "NoStack", "No stack to destroy.")

            def body(events: EngineLog) -> None:
                stack = self._stack(pool)
                with stack.answering_from(events):
                    stack.destroy_and_remove(program=_noop_program, **_reporting_to(events))

            try:
                _, op = self._run(pool, "destroy", body)
            except StackError as err:
                if err.reason != STACK_NOT_FOUND:
                    raise
                # Gone from the backend since this driver last looked (removed by hand, a
                # backend emptied): there is nothing left to destroy, and the caller removes
                # by tag what the lost stack owned.
                op = self._oplog.begin(pool, "destroy")
                op = self._oplog.finish(op, oplog.SUCCEEDED, "NoStack", err.message)
            finally:
                self._outputs.pop(pool, None)
            self._forget(pool)
            shutil.rmtree(self._paths.workspace(pool), ignore_errors=True)
            return op

    def recover(self) -> list[RecoveryReport]:
        """On becoming leader, before any other operation: repair every stack of the project.
        From here until `step_down()`, a lock held by anyone else is stale (``locks``)."""
        self._leading = True
        self._known = None  # a standby's view; the old leader may have made stacks since
        reports = []
        for pool in self._stack_names():
            with self._lock(pool):
                report = self._recover(pool)
            if not report.clean:
                self._log.warning(
                    "stack %s recovered: aborted=%s lock_cancelled=%s live_holders=%s %s",
                    pool,
                    report.aborted.operation if report.aborted else None,
                    report.lock_cancelled,
                    list(report.live_lock_holders),
                    "; ".join(r.describe() for r in report.resolutions),
                    extra={"pool": pool, "stack_operation": "recover"},
                )
            reports.append(report)
        return reports

    def step_down(self) -> None:
        """Leadership is lost: break no lock from now on (the new leader may hold it)."""
        self._leading = False

    # --- internals -------------------------------------------------------------------------
    def _lock(self, pool: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(pool, threading.Lock())

    def _workspace(self, work_dir: Path) -> PoolWorkspace:
        work_dir.mkdir(parents=True, exist_ok=True)
        return PoolWorkspace(
            work_dir=str(work_dir),
            pulumi_home=str(self._paths.home),
            env_vars=self._env,
            secrets_provider=self._settings.pulumi.secrets_provider,
            project_settings=auto.ProjectSettings(
                name=self.project,
                runtime="python",
                main=str(work_dir),
                backend=auto.ProjectBackend(url=self.backend_url),
            ),
            pulumi_command=self._command,
        )

    def _stack(self, pool: str, *, new: bool = False) -> PoolStack:
        """The pool's stack: attached (no CLI) when it exists, created (`stack init`) when
        ``new``. The caller holds the pool's lock and has checked `_exists`."""
        stack = self._stacks.get(pool)
        if stack is None:
            problem = secrets_problem(self._settings)
            if problem is not None:
                raise problem
            workspace = self._workspace(self._paths.workspace(pool))
            if new:
                try:
                    stack = PoolStack.init(pool, workspace)
                except auto.StackAlreadyExistsError:
                    # Made since we looked (by another replica, before we led): use it.
                    stack = PoolStack.attach(pool, workspace)
            else:
                stack = PoolStack.attach(pool, workspace)
            self._stacks[pool] = stack
            if self._known is not None:
                self._known.add(pool)
        return stack

    def _exists(self, pool: str) -> bool:
        if self._file is not None:
            return self._file.exists(pool)
        if pool in self._stacks:
            return True
        if self._known is None:
            self.list_stacks()
        return self._known is not None and pool in self._known

    def _stack_names(self) -> list[str]:
        if self._file is not None:
            return self._file.stack_names()
        return [s.name for s in self.list_stacks()]

    def _forget(self, pool: str) -> None:
        """The pool's stack is gone (destroyed, or never there)."""
        self._stacks.pop(pool, None)
        self._outputs.pop(pool, None)
        if self._known is not None:
            self._known.discard(pool)

    def _current(self, pool: str) -> PoolOutputs | None:
        """The outputs of the last successful update; the caller holds the pool's lock."""
        cached = self._outputs.get(pool)
        if cached is not None:
            return cached
        latest: Mapping[str, Any] | None = None
        if self._file is not None:
            if not self._file.exists(pool):
                return None
            latest = self._file.checkpoint(pool)
        if latest is None:
            if not self._exists(pool):
                return None
            try:
                latest = self._stack(pool).export_stack().deployment or {}
            except auto.StackNotFoundError:
                # Removed from the backend behind this driver's back: it is not prepared.
                self._log.warning("stack %s is gone from the backend", pool, extra={"pool": pool})
                self._forget(pool)
                return None
        outputs = _parse_state(latest)
        if outputs is not None:
            self._outputs[pool] = outputs
        return outputs

    def _prepared(self, pool: str, operation: str) -> PoolOutputs:
        current = self._current(pool)
        if current is None:
            raise StackError(
                POOL_NOT_PREPARED,
                f"Pool {pool} has no prepared stack to {operation}; prepare it first.",
                kind=FailureKind.NOT_PREPARED,
                pool=pool,
                operation=operation,
            )
        return current

    def _up(self, spec: PoolSpec, record: InstanceSetRecord | None, operation: str) -> StackResult:
        pool = spec.pool
        events_seen: list[EngineLog] = []

        def body(events: EngineLog) -> auto.UpResult:
            events_seen.append(events)
            stack = self._stack(pool, new=not self._exists(pool))
            with stack.answering_from(events):
                return stack.up(program=pool_program(spec, record), **_reporting_to(events))

        self._outputs.pop(pool, None)
        result, op = self._run(pool, operation, body)
        try:
            outputs = PoolOutputs.from_outputs(result.outputs)
        except OutputsError:
            # The update succeeded but its events carried no pool outputs: read the state.
            self._log.warning(
                "stack %s %s: no stack outputs in the engine events; reading the state",
                pool,
                operation,
                extra={"pool": pool, "stack_operation": operation},
            )
            current = self._current(pool)
            if current is None:
                raise
            outputs = current
        self._outputs[pool] = outputs
        return StackResult(op, outputs, events_seen[-1].changes if events_seen else {})

    def _run(
        self, pool: str, operation: str, body: Callable[[EngineLog], T]
    ) -> tuple[T, oplog.StackOperation]:
        """Marker, body (retried once after clearing a stale lock), result; StackError on
        failure, carrying the recorded operation."""
        op = self._oplog.begin(pool, operation)
        events = self._events(pool, operation)
        try:
            try:
                if self._provider_host is not None:
                    self._env.update(self._provider_host.attach_environment())
                value = body(events)
            except Exception as exc:
                if not (is_locked(exc) and self._clear_stale_lock(pool, str(exc))):
                    raise
                events = self._events(pool, operation)
                value = body(events)
        except Exception as exc:
            err = classify(exc, events.diagnostics, pool=pool, operation=operation)
            self._oplog.finish(op, oplog.FAILED, err.reason, err.message)
            if err.reason == STACK_NOT_FOUND:
                self._forget(pool)  # the next look reads the backend, not this memory
            self._log.error(
                "stack %s %s failed: %s",
                pool,
                operation,
                err,
                extra={"pool": pool, "stack_operation": operation},
            )
            raise err from exc
        return value, self._oplog.finish(op, oplog.SUCCEEDED)

    def _events(self, pool: str, operation: str) -> EngineLog:
        return EngineLog(self._log, pool, operation, tuple(RESOURCE_NAMES.values()))

    def _holders(self, pool: str, message: str = "") -> list[LockHolder]:
        if self._file is not None:
            return self._file.lock_holders(pool)
        return holders_from_message(message)

    def _stale(self, holder: LockHolder) -> bool:
        return is_stale(holder, leading=self._leading)

    def _clear_stale_lock(self, pool: str, message: str) -> bool:
        """Our own operation on ``pool`` met a lock: not ours (we hold the pool's lock in
        this process), so it may go exactly when we lead."""
        holders = self._holders(pool, message)
        if not self._leading or not all(self._stale(h) for h in holders):
            return False
        self._cancel(pool, holders)
        return True

    def _cancel(self, pool: str, holders: Sequence[LockHolder]) -> None:
        self._log.warning(
            "stack %s: cancelling stale lock held by %s",
            pool,
            ", ".join(h.describe() for h in holders) or "a process that recorded no marker",
            extra={"pool": pool, "stack_operation": "recover"},
        )
        self._known = None  # a failed `stack init` may or may not have left the stack
        if not self._exists(pool):
            # A `stack init` that failed after writing its lock (``orphan_locks``): there is
            # no stack for `pulumi cancel` to load, so the lock files go one by one.
            self._remove_orphan_locks(pool)
            return
        self._stack(pool).cancel()

    def _remove_orphan_locks(self, pool: str) -> None:
        if self._lock_files is None:
            self._lock_files = lock_files_for(self._settings, self._file)
        if self._lock_files is not None:
            removal = remove_stale(self._lock_files, pool, leading=self._leading)
            self._log.warning(
                "stack %s does not exist: removed %d lock file(s) of stale holders, kept %d",
                pool,
                len(removal.removed),
                len(removal.kept),
                extra={"pool": pool, "stack_operation": "recover"},
            )

    def _recover(self, pool: str) -> RecoveryReport:
        aborted = self._oplog.abort_unfinished(pool)
        cancelled = False
        if self._file is not None:
            holders = self._file.lock_holders(pool)
            live = [h for h in holders if not self._stale(h)]
            if live:  # only when not leading: recover() is the leader's
                return RecoveryReport(
                    pool, aborted, live_lock_holders=tuple(h.describe() for h in live)
                )
            if holders:
                self._cancel(pool, holders)
                cancelled = True
        else:
            # Another backend shows its locks only to an operation that meets them, and a
            # lock of a dead leader's pod is in no marker of ours (it had its own disk): clear
            # whatever is there. `pulumi cancel` on a stack without a lock changes nothing.
            self._stack(pool).cancel()
            cancelled = aborted is not None
        pending = self._file.pending_operations(pool) if self._file is not None else None
        resolutions: list[Resolution] = []
        refreshed = False
        if pending is None or pending:
            resolutions, refreshed = self._resolve_pending(pool)
        self._outputs.pop(pool, None)
        return RecoveryReport(
            pool,
            aborted,
            lock_cancelled=cancelled,
            resolutions=tuple(resolutions),
            refreshed=refreshed,
        )

    def _resolve_pending(self, pool: str) -> tuple[list[Resolution], bool]:
        def body(events: EngineLog) -> tuple[list[Resolution], bool]:
            stack = self._stack(pool)
            exported = stack.export_stack()
            deployment = exported.deployment or {}
            if not deployment.get("pending_operations"):
                return [], False
            edited, resolutions = resolve(deployment, find_created)
            stack.import_stack(auto.Deployment(version=exported.version, deployment=edited))
            refresh = any(r.action == "refresh" for r in resolutions)
            if refresh:
                with stack.answering_from(events):
                    stack.refresh(
                        program=_noop_program,
                        **_reporting_to(events),
                    )
            return resolutions, refresh

        value, _ = self._run(pool, "recover", body)
        return value


def _parse_state(latest: Mapping[str, Any]) -> PoolOutputs | None:
    try:
        return PoolOutputs.from_state(latest)
    except OutputsError:
        return None  # never prepared, or not a pool's stack


def _mtime(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None
