"""`StackBackend`: the project's stacks as the state backend holds them, for the driver.

Owned by `StackDriver` (``driver``) and its recovery (``recovery``); nothing else uses it.
It answers which pool stacks exist, hands out each pool's stack (attached without a CLI
run when it exists, created with `stack init` when asked), lists the project's stacks, and
keeps each pool's last known outputs. Whether a stack exists is read from the backend (the
state files of a `file://` backend, or one `stack ls` of the project remembered until
`forget_listing()`), never learned from a failing `stack select`. The caller holds the
pool's lock around every call that names a pool.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from provisioner.api.settings import Settings
from provisioner.pulumi_driver.cli_env import StatePaths, cli_backend_url, secrets_problem
from provisioner.pulumi_driver.reports import StackSummary
from provisioner.pulumi_driver.sdk import PoolStack, PoolWorkspace
from provisioner.pulumi_driver.statefile import FileBackend
from stacks.outputs import OutputsError, PoolOutputs

__all__ = ["StackBackend", "parse_state"]


class StackBackend:
    def __init__(
        self,
        settings: Settings,
        paths: StatePaths,
        env: dict[str, str],
        command: auto.PulumiCommand,
        file: FileBackend | None,
        log: logging.Logger,
    ) -> None:
        self._settings = settings
        self._paths = paths
        # Every workspace holds this dict itself (not a copy): the driver sets the provider
        # host's attach variable in it before each engine run.
        self._env = env
        self._command = command
        self.file = file
        self._log = log
        self.project = settings.pulumi.project_name
        self.backend_url = settings.pulumi.backend_url
        self._stacks: dict[str, PoolStack] = {}
        # The project's stacks on a non-file backend, where asking costs a CLI run: one
        # `stack ls`, then kept up to date by this driver's own creates and destroys (only
        # this driver creates stacks while it leads). recover() and read_outputs() list again.
        self._known: set[str] | None = None
        self._outputs: dict[str, PoolOutputs] = {}

    # --- which stacks exist ----------------------------------------------------------------
    def exists(self, pool: str) -> bool:
        if self.file is not None:
            return self.file.exists(pool)
        if pool in self._stacks:
            return True
        if self._known is None:
            self.list_stacks()
        return self._known is not None and pool in self._known

    def stack_names(self) -> list[str]:
        if self.file is not None:
            return self.file.stack_names()
        return [s.name for s in self.list_stacks()]

    def list_stacks(self) -> list[StackSummary]:
        """Every stack of the project (every pool, including ones whose GangNodePool is gone)."""
        if self.file is not None:
            backend = self.file
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
        workspace = self.workspace(self._paths.project_workspace)
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

    def forget_listing(self) -> None:
        """The next question about which stacks exist lists the project again."""
        self._known = None

    def forget(self, pool: str) -> None:
        """The pool's stack is gone (destroyed, or never there)."""
        self._stacks.pop(pool, None)
        self._outputs.pop(pool, None)
        if self._known is not None:
            self._known.discard(pool)

    # --- a pool's stack --------------------------------------------------------------------
    def workspace(self, work_dir: Path) -> PoolWorkspace:
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
                backend=auto.ProjectBackend(url=cli_backend_url(self.backend_url)),
            ),
            pulumi_command=self._command,
        )

    def stack(self, pool: str, *, new: bool = False) -> PoolStack:
        """The pool's stack: attached (no CLI) when it exists, created (`stack init`) when
        ``new``. The caller holds the pool's lock and has checked `exists`."""
        stack = self._stacks.get(pool)
        if stack is None:
            problem = secrets_problem(self._settings)
            if problem is not None:
                raise problem
            workspace = self.workspace(self._paths.workspace(pool))
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

    # --- a pool's outputs ------------------------------------------------------------------
    def cached(self, pool: str) -> PoolOutputs | None:
        return self._outputs.get(pool)

    def remember(self, pool: str, outputs: PoolOutputs) -> None:
        self._outputs[pool] = outputs

    def drop_outputs(self, pool: str) -> None:
        self._outputs.pop(pool, None)

    def current(self, pool: str) -> PoolOutputs | None:
        """The outputs of the last successful update; the caller holds the pool's lock."""
        cached = self._outputs.get(pool)
        if cached is not None:
            return cached
        latest: Mapping[str, Any] | None = None
        if self.file is not None:
            if not self.file.exists(pool):
                return None
            latest = self.file.checkpoint(pool)
        if latest is None:
            if not self.exists(pool):
                return None
            try:
                latest = self.stack(pool).export_stack().deployment or {}
            except auto.StackNotFoundError:
                # Removed from the backend behind this driver's back: it is not prepared.
                self._log.warning("stack %s is gone from the backend", pool, extra={"pool": pool})
                self.forget(pool)
                return None
        outputs = parse_state(latest)
        if outputs is not None:
            self._outputs[pool] = outputs
        return outputs


def parse_state(latest: Mapping[str, Any]) -> PoolOutputs | None:
    try:
        return PoolOutputs.from_state(latest)
    except OutputsError:
        return None  # never prepared, or not a pool's stack


def _mtime(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None
