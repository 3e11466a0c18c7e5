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
  the leader Lease keeps one active controller, and the driver writes a stack only behind
  its fence (``fence``): `recover()` takes the term of the Lease the elector last renewed,
  and every operation checks, before it starts, that this term is still valid (its renew
  deadline, on the monotonic clock, not passed). Each CLI runs in its own process group
  (`FencedCommand`), and the moment the fence closes — `step_down()`, or the renew deadline
  passing unrenewed — every running CLI's group is killed. With an ``s3://`` backend the
  CLI's S3 traffic goes through the controller (``s3_fence``), which forwards a write only
  while the fence is open, so a CLI left running by a paused controller writes nothing once
  it resumes. Pulumi's own stack lock is broken only when its holder cannot still be
  writing (``locks.is_stale``): a lock of this host when no Pulumi CLI runs under its pid,
  one of another host once that host's fence has certainly closed; a standby breaks none.
- Every operation is marked before and recorded after (``oplog``); `recover()` turns a
  marker without a result into an ``aborted`` record, cancels stale locks, and resolves
  pending operations (adopting what a crashed create made, ``pending``), through
  ``recovery``. It never re-runs the interrupted operation: the reconciler asks again from
  its own state. A stack's first prepare writes its state once, its spec kept in the backend
  until it succeeds; a destroy of a stack it left without outputs runs it again first
  (``intents``). A record or remove writes it once on a stack this process last saw complete.
- Drift is repaired (``drift``): an `up` that meets a resource of the stack gone from AWS
  (deleted by hand) refreshes the stack once and runs again, and `prepare(refresh_first=True)`
  refreshes before its `up` (the launch met the missing resource); never more than one refresh
  per operation. What was remade comes back in `StackResult.repairs`.
- Engine events stream into the controller's log (``engine_log``); failures become `StackError`
  with a named reason (``errors``).
- The warm path does not start the CLI: `outputs` answers from memory, then from the state
  file of a `file://` backend, and only then asks the CLI.
- Engine runs share one provider host process (``provider_host``) unless
  ``stackOperations.providerHost`` is ``perOperation``.
- An operation starts as few CLI processes as it can (``sdk``): an `up` is one, a new stack
  adds its `stack init`, a destroy is one (`destroy --remove`). Whether a stack exists is
  read from the backend (``stack_backend``: the state files, or one `stack ls` of the
  project remembered until `recover()` or `read_outputs()` looks again), never learned from
  a failing `stack select`; the outputs come from the update's own engine events.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TypeVar

from pulumi import automation as auto

from provisioner.api.constants import FailureKind
from provisioner.api.settings import Settings
from provisioner.cloud.fencing import FENCE_FILE_VARIABLE, FenceFile
from provisioner.pulumi_driver import oplog
from provisioner.pulumi_driver.cli_env import (
    StatePaths,
    checkpoint_backups_off,
    cli_environment,
)
from provisioner.pulumi_driver.drift import DroppedResource, up_repairing
from provisioner.pulumi_driver.engine_log import REFRESH, EngineLog
from provisioner.pulumi_driver.errors import (
    CLI_UNAVAILABLE,
    FENCE_CLOSED,
    POOL_NOT_PREPARED,
    STACK_NOT_FOUND,
    StackError,
    classify,
    is_locked,
)
from provisioner.pulumi_driver.fence import (
    UNFENCED,
    Fence,
    FenceClosed,
    FencedCommand,
    FencingToken,
)
from provisioner.pulumi_driver.intents import prepare_intents_for
from provisioner.pulumi_driver.inventory import operator_command
from provisioner.pulumi_driver.locks import BreakRule
from provisioner.pulumi_driver.provider_host import SharedProviderHost
from provisioner.pulumi_driver.recovery import StackRecovery
from provisioner.pulumi_driver.reports import RecoveryReport, StackResult, StackSummary
from provisioner.pulumi_driver.s3_fence import s3_fence_for
from provisioner.pulumi_driver.sdk import noop_program
from provisioner.pulumi_driver.stack_backend import StackBackend, parse_state
from provisioner.pulumi_driver.statefile import FileBackend, file_backend_root
from stacks.outputs import OutputsError, PoolOutputs
from stacks.pool_program import RESOURCE_NAMES, pool_program
from stacks.spec import InstanceSetRecord, PoolSpec

__all__ = ["RecoveryReport", "StackDriver", "StackResult", "StackSummary"]

T = TypeVar("T")


class StackDriver:
    def __init__(
        self,
        settings: Settings,
        pulumi_root: Path,
        log: logging.Logger,
        *,
        fence: Fence | None = None,
    ) -> None:
        """``fence``: the composition root's, enforced when replicas elect a leader; by
        default one open whenever `recover()` has run (one writer by configuration: tests,
        the operator's commands)."""
        self._settings = settings
        self._log = log
        paths = StatePaths(Path(settings.pulumi.state_dir))
        self._paths = paths
        self.project = settings.pulumi.project_name
        self.backend_url = settings.pulumi.backend_url
        self._env = cli_environment(settings, Path(pulumi_root), paths)
        root = file_backend_root(self.backend_url)
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        self._file = FileBackend(root, self.project) if root is not None else None
        paths.home.mkdir(parents=True, exist_ok=True)
        self._oplog = oplog.OperationLog(paths.operations)
        self.fence = fence if fence is not None else Fence(enforced=False)
        # The provider host's EC2 calls check the fence's deadline in this file
        # (``cloud.fencing``); every CLI process, and the host it starts, is told where.
        # One file per fence: another driver on the same state directory (an operator's
        # command) must not open this one's.
        self._fence_file = FenceFile(paths.root / f"fence-{os.getpid()}-{id(self.fence):x}")
        self.fence.publish_to(self._fence_file)
        self._env[FENCE_FILE_VARIABLE] = str(self._fence_file.path)
        self._term: FencingToken | None = None  # the term `recover()` ran under
        try:
            command = FencedCommand(str(pulumi_root), self.fence)
        except (OSError, subprocess.CalledProcessError, auto.InvalidVersionError) as exc:
            raise StackError(
                CLI_UNAVAILABLE,
                f"The Pulumi CLI under {pulumi_root} does not run or is too old ({exc}).",
                kind=FailureKind.CONFIG,
            ) from exc
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._backend = StackBackend(settings, paths, self._env, command, self._file, log)
        self._recovery = StackRecovery(self._backend, self._oplog, settings, log)
        self._recovery.rule = self._break_rule
        self.s3_fence = s3_fence_for(settings, self.fence, checkpoint_backups_off(self._env))
        if self.s3_fence is not None:
            # Every CLI process (and the driver's own lock-file deletes) reach the state
            # bucket through the fence (``s3_fence``).
            self._env["AWS_ENDPOINT_URL_S3"] = self.s3_fence.endpoint_url
            self._recovery.endpoint_url = self.s3_fence.endpoint_url
        self._intents = prepare_intents_for(settings, self._file, self._recovery.endpoint_url)
        # Pools whose last `up` succeeded here: a record or remove can create only the set.
        self._complete: set[str] = set()
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
        """Stop the shared provider host and the S3 fence (the controller is shutting
        down)."""
        if self._provider_host is not None:
            self._provider_host.close()
        if self.s3_fence is not None:
            self.s3_fence.close()
        self._fence_file.path.unlink(missing_ok=True)

    # --- reads (no CLI on the warm path) ---------------------------------------------------
    def outputs(self, pool: str) -> PoolOutputs | None:
        """The pool's stack outputs, or None when the pool has no prepared stack."""
        cached = self._backend.cached(pool)
        if cached is not None:
            return cached
        if self._file is not None:
            # The state file is replaced whole, so it can be read while an update runs.
            latest = self._file.checkpoint(pool)
            if latest is not None:
                return parse_state(latest)
        with self._lock(pool):
            return self._backend.current(pool)

    def read_outputs(self, pool: str) -> PoolOutputs | None:
        """The outputs as the backend holds them now, not as this driver last saw them: for
        observers of stacks another process writes (a standby, the inventory, a test)."""
        with self._lock(pool):
            self._backend.drop_outputs(pool)
            self._backend.forget_listing()
            return self._backend.current(pool)

    def holds(self, pool: str) -> bool:
        """Whether the backend holds a stack for the pool, prepared or not: the state files
        of a `file://` backend, else the listing `recover()` made, kept current by this
        driver's own creates and destroys (no CLI once listed)."""
        with self._lock(pool):
            return self._backend.exists(pool)

    def needs_prepare(self, spec: PoolSpec) -> bool:
        """False when the stack already holds exactly ``spec``: the warm path may launch
        from the recorded launch template without an `up`."""
        current = self.outputs(spec.pool)
        return current is None or current.spec != spec

    def last_operation(self, pool: str) -> oplog.StackOperation | None:
        return self._oplog.last(pool)

    def list_stacks(self) -> list[StackSummary]:
        """Every stack of the project (every pool, including ones whose GangNodePool is gone)."""
        return self._backend.list_stacks()

    def operator_command(self) -> str:
        """The exact command an operator runs to list every pool's stack."""
        return operator_command(self._settings)

    # --- operations ------------------------------------------------------------------------
    def prepare(self, spec: PoolSpec, *, refresh_first: bool = False) -> StackResult:
        """Create or update the pool's infrastructure; a recorded gang stays recorded.
        ``refresh_first``: a launch met a resource of the stack gone from AWS; the stack is
        refreshed before the `up`, which makes it again (``drift``)."""
        with self._lock(spec.pool):
            current = self._backend.current(spec.pool)
            record, held = (current.record, True) if current else (None, False)
            # A stack with no outputs yet writes its state once, its spec kept beside it
            # until the `up` succeeds (``intents``).
            once = not held and self._intents.enabled
            if once:
                self._intents.mark(spec)
            result = self._up_repairing(
                spec, record, "prepare", held=held, refresh_first=refresh_first, state_once=once
            )
            if once:
                self._intents.clear(spec.pool)
            return result

    def record_instance_set(
        self, pool: str, group: str, instance_ids: Sequence[str]
    ) -> StackResult:
        """Record the gang the engine launched; its ids become the `instanceIds` output."""
        record = InstanceSetRecord(group, tuple(instance_ids))
        with self._lock(pool):
            spec = self._prepared(pool, "record").spec
            return self._up_repairing(spec, record, "record", held=True, set_only=True)

    def remove_instance_set(self, pool: str) -> StackResult:
        """Release the recorded gang (terminate, clean ENIs) and keep the pool's template."""
        with self._lock(pool):
            spec = self._prepared(pool, "remove").spec
            return self._up_repairing(spec, None, "remove", held=True, set_only=True)

    def destroy(self, pool: str) -> oplog.StackOperation:
        """Release everything the pool owns, then remove its stack (gone from `stack ls`)."""
        with self._lock(pool):
            if not self._backend.exists(pool):
                self._backend.forget(pool)
                op = self._oplog.begin(pool, "destroy")
                return self._oplog.finish(op, oplog.SUCCEEDED, "NoStack", "No stack to destroy.")
            unfinished = self._intents.unfinished(pool, self._backend.current(pool))
            if unfinished is not None:
                again = partial(self._up, unfinished, None, "prepare", state_once=True)
                self._intents.finish(unfinished, again, self._log)

            def body(events: EngineLog) -> None:
                stack = self._backend.stack(pool)
                with stack.answering_from(events):
                    stack.destroy_and_remove(program=noop_program, **events.reporting())

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
                self._backend.drop_outputs(pool)
            self._backend.forget(pool)
            self._complete.discard(pool)
            if unfinished is not None:
                self._intents.clear(pool)  # ran again or not, the stack it was for is gone
            shutil.rmtree(self._paths.workspace(pool), ignore_errors=True)
            return op

    def recover(self) -> list[RecoveryReport]:
        """On becoming leader, before any other operation: repair every stack of the project.
        Takes the fence's current term: every operation until `step_down()` checks it is
        still valid. A lock whose holder may still be alive stays (``locks``)."""
        if not self.fence.enforced:
            self.fence.extend(UNFENCED)  # leading by configuration, from now on
        try:
            self._term = self.fence.check()
        except FenceClosed as closed:
            raise self._fenced("*", "recover", closed) from closed
        # A standby's view of which stacks exist; the old leader may have made stacks since.
        self._backend.forget_listing()
        if self._backend.file is not None:
            for sidecar in self._backend.file.remove_unreadable_sidecars():
                self._log.warning(
                    "removed %s: a blob-metadata file a killed CLI left unreadable, which "
                    "failed every read of its stack",
                    sidecar,
                    extra={"stack_operation": "recover"},
                )
        reports = []
        for pool in self._backend.stack_names():
            with self._lock(pool):
                report = self._recovery.recover(pool, self._run)
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
        """Leadership is lost: close the fence, which kills every running CLI's process
        group; no stack is written and no lock broken from now on."""
        self._term = None
        self.fence.close("stepped down")

    # --- internals -------------------------------------------------------------------------
    def _lock(self, pool: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(pool, threading.Lock())

    def _prepared(self, pool: str, operation: str) -> PoolOutputs:
        current = self._backend.current(pool)
        if current is None:
            raise StackError(
                POOL_NOT_PREPARED,
                f"Pool {pool} has no prepared stack to {operation}; prepare it first.",
                kind=FailureKind.NOT_PREPARED,
                pool=pool,
                operation=operation,
            )
        return current

    def _up_repairing(
        self,
        spec: PoolSpec,
        record: InstanceSetRecord | None,
        operation: str,
        *,
        held: bool,
        refresh_first: bool = False,
        state_once: bool = False,
        set_only: bool = False,
    ) -> StackResult:
        """`_up`, with at most one refresh when the stack has drifted (``drift``); ``set_only``:
        state once while the stack is complete (not after a refresh: the repair checkpoints)."""

        def up() -> StackResult:
            once = state_once or (set_only and spec.pool in self._complete)
            return self._up(spec, record, operation, state_once=once)

        return up_repairing(
            up,
            lambda: self._refresh(spec.pool),
            refresh_first=refresh_first,
            held_anything=held,
        )

    def _refresh(self, pool: str) -> list[DroppedResource]:
        """`pulumi refresh`: each provider reads its resource, and the ones AWS no longer
        has are dropped from the state. Returns those."""
        self._complete.discard(pool)

        def body(events: EngineLog) -> list[DroppedResource]:
            stack = self._backend.stack(pool)
            with stack.answering_from(events):
                stack.refresh(program=noop_program, **events.reporting())
            return [DroppedResource(name, rid) for name, rid in events.dropped]

        self._backend.drop_outputs(pool)
        dropped, _ = self._run(pool, REFRESH, body)
        self._log.warning(
            "stack %s refreshed: %s",
            pool,
            ", ".join(f"{d.name} {d.resource_id} gone from AWS" for d in dropped)
            or "every resource still exists",
            extra={"pool": pool, "stack_operation": "refresh"},
        )
        return dropped

    def _up(
        self, spec: PoolSpec, record: InstanceSetRecord | None, operation: str, *, state_once: bool
    ) -> StackResult:
        pool = spec.pool
        events_seen: list[EngineLog] = []

        def body(events: EngineLog) -> auto.UpResult:
            events_seen.append(events)
            stack = self._backend.stack(pool, new=not self._backend.exists(pool))
            with stack.answering_from(events):
                program = pool_program(spec, record)
                return stack.update(program, state_once=state_once, **events.reporting())

        self._backend.drop_outputs(pool)
        self._complete.discard(pool)
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
            current = self._backend.current(pool)
            if current is None:
                raise
            outputs = current
        self._backend.remember(pool, outputs)
        self._complete.add(pool)
        return StackResult(op, outputs, events_seen[-1].changes if events_seen else {})

    def _run(
        self, pool: str, operation: str, body: Callable[[EngineLog], T]
    ) -> tuple[T, oplog.StackOperation]:
        """Marker, body (retried once after clearing a stale lock), result; StackError on
        failure, carrying the recorded operation."""
        try:
            if self.fence.enforced and self._term is None:
                raise FenceClosed("this replica has not recovered the stacks as the leader")
            self.fence.check(self._term)
        except FenceClosed as closed:
            raise self._fenced(pool, operation, closed) from closed
        op = self._oplog.begin(pool, operation)
        events = self._events(pool, operation)
        try:
            try:
                if self._provider_host is not None:
                    self._env.update(self._provider_host.attach_environment())
                value = body(events)
            except Exception as exc:
                if not (is_locked(exc) and self._recovery.clear_stale_lock(pool, str(exc))):
                    raise
                events = self._events(pool, operation)
                value = body(events)
        except Exception as exc:
            err = classify(exc, events.diagnostics, pool=pool, operation=operation)
            self._oplog.finish(op, oplog.FAILED, err.reason, err.message)
            if err.reason == STACK_NOT_FOUND:
                self._backend.forget(pool)  # the next look reads the backend, not this memory
            self._log.error(
                "stack %s %s failed: %s",
                pool,
                operation,
                err,
                extra={"pool": pool, "stack_operation": operation},
            )
            raise err from exc
        return value, self._oplog.finish(op, oplog.SUCCEEDED)

    def _break_rule(self) -> BreakRule:
        """What may be broken now (``locks``): nothing unless this term's token is valid."""
        token = self.fence.token()
        if token is None or self._term is None or not token.same_term(self._term):
            return BreakRule.not_leading()
        return BreakRule(token, time.monotonic())

    def _fenced(self, pool: str, operation: str, closed: FenceClosed) -> StackError:
        return StackError(
            FENCE_CLOSED,
            f"Stack {operation} of {pool} not started: {closed}.",
            kind=FailureKind.RETRYABLE,
            pool=pool,
            operation=operation,
        )

    def _events(self, pool: str, operation: str) -> EngineLog:
        return EngineLog(self._log, pool, operation, tuple(RESOURCE_NAMES.values()))
