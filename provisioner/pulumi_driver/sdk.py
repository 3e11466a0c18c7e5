"""`PoolWorkspace` and `PoolStack`: the Automation API's `LocalWorkspace` and `Stack`, minus
the CLI processes whose answers the driver already has (DESIGN §5: as few CLI processes per
operation as the SDK allows).

Used by the stack driver only. What the pinned SDK does, and what these change:

- ``Stack.select`` runs `pulumi stack select` to make the stack "current" in the work dir, and
  ``Stack.create_or_select`` runs it before `stack init` and lets it fail for a new stack.
  Every command a `Stack` runs names its stack (``--stack``), and the driver knows from the
  backend whether a stack exists, so `PoolWorkspace.select_stack` starts nothing: the driver
  attaches to a stack it knows (`PoolStack.attach`) and creates, with `stack init`, only one
  it knows is new (`PoolStack.init`).
- ``Stack.up`` ends with ``self.outputs()`` (two `stack output` processes) and
  ``self.info()`` (`stack history`); ``destroy`` and ``refresh`` with ``self.info()``. Inside
  `PoolStack.answering_from(events)` both answer from the operation's own engine events: the
  outputs the root stack resource reported, and a summary made from the summary event. So an
  `up` is one CLI process.
- ``Stack.destroy(remove=True)`` runs `stack rm` after the destroy, not `destroy --remove`,
  only so that its ``self.info()`` can still read the stack. Answering from events, nothing
  reads it afterwards, so `PoolStack.destroy_and_remove` passes `--remove` (through
  ``_run_pulumi_cmd_sync``, where every command's arguments pass): a destroy is one process.

Both lean on how the pinned SDK (`SDK_VERSION`, pyproject's pin) writes `Stack`;
``tests/unit/test_pulumi_sdk_lean.py`` runs them against a CLI that records its commands and
fails, naming what to re-check, when an upgrade changes what they lean on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final

from pulumi import automation as auto
from pulumi.automation._stack import StackInitMode

from provisioner.pulumi_driver.engine_log import EngineLog

__all__ = ["SDK_VERSION", "STATE_ONCE_ENVIRONMENT", "PoolStack", "PoolWorkspace", "noop_program"]

# The SDK whose `Stack` this module was checked against (pyproject pins `pulumi` to it).
SDK_VERSION: Final = "3.260.0"

# An operation that writes the stack's state once, at its end, not before and after each
# resource step (the CLI's `PULUMI_SKIP_CHECKPOINTS`, "skip saving state checkpoints and only
# save the final deployment"; no longer behind `PULUMI_EXPERIMENTAL` in the pinned CLI, and a
# CLI that ignored it fails `test_stack_cli_processes`' count and `test_stack_crash`). The
# final deployment is saved whether the operation succeeds or fails (the snapshot manager's
# close); only a killed CLI leaves the state as it was before. On the S3 backend that is a
# third of a destroy's requests and half a new stack's first `up`'s. Two operations run so:
# - a destroy (`destroy_and_remove`): cut short, it leaves every resource in the state and
#   no pending delete; the next destroy deletes each again, and every pool resource's delete
#   of what is already gone succeeds (`stacks`: NotFound is done);
# - the `up` of a stack with no outputs yet (`up_writing_state_once`): cut short, it leaves
#   no pending create for recovery to adopt, so the driver keeps the spec it ran with beside
#   the stack first (``intents``), and what it made is found again by name;
# - a record or remove of the gang's set on a stack whose last `up` the driver saw succeed
#   (its state holds every other resource, so the only create is the set's, which makes
#   nothing in AWS: it checks the instances): cut short, the state is as before, the pool's
#   status still says unrecorded, and it is recorded again; a remove deletes the set again.
# Every other `up` keeps its checkpoints: its pending creates are what recovery adopts
# (`pending`).
STATE_ONCE_ENVIRONMENT: Final = {"PULUMI_SKIP_CHECKPOINTS": "true"}


class PoolWorkspace(auto.LocalWorkspace):
    """One stack's work dir, where selecting a stack starts no CLI process."""

    def select_stack(self, stack_name: str) -> None:
        """Nothing to do: every command the driver runs passes ``--stack``, and the driver
        checks that the stack exists before it attaches to it (module docstring)."""


class PoolStack(auto.Stack):
    """A pool's stack whose operations end when their CLI process does."""

    _answering: tuple[EngineLog, datetime] | None = None
    _remove_after_destroy = False

    @classmethod
    def attach(cls, name: str, workspace: PoolWorkspace) -> PoolStack:
        """A stack the backend holds; starts no CLI process."""
        # `Stack.select` and `Stack.create` build a plain `Stack`, so the mode is given here.
        return cls(name, workspace, StackInitMode.SELECT)

    @classmethod
    def init(cls, name: str, workspace: PoolWorkspace) -> PoolStack:
        """A new stack: one `stack init` (StackAlreadyExistsError when it is not new)."""
        return cls(name, workspace, StackInitMode.CREATE)

    @contextmanager
    def answering_from(self, events: EngineLog) -> Iterator[None]:
        """Within: `outputs()` and `info()` answer from ``events`` (the engine events of the
        operation run inside), not from the CLI. The driver runs one operation per stack at
        a time, so one slot is enough."""
        self._answering = (events, datetime.now(UTC))
        try:
            yield
        finally:
            self._answering = None

    def destroy_and_remove(self, **kwargs: Any) -> auto.DestroyResult:
        """`pulumi destroy --remove`: once every resource is deleted, the same CLI process
        removes the stack and its config, writing the state once. Only inside
        `answering_from` (module docstring)."""
        if self._answering is None:
            raise RuntimeError("destroy_and_remove runs inside answering_from(events)")
        self._remove_after_destroy = True
        try:
            with self._writing_state_once():
                return self.destroy(**kwargs)
        finally:
            self._remove_after_destroy = False

    def update(self, program: auto.PulumiFn, *, state_once: bool, **kwargs: Any) -> auto.UpResult:
        """The driver's `pulumi up`, past a failed resource (`--continue-on-error`): every
        step whose inputs are there runs, so one run reports every wrong input (independent
        resources start in the order their registrations reach the engine, and without it
        the first to fail stops the others from starting). ``state_once``: the state written
        at the end only (`up_writing_state_once`)."""
        up = self.up_writing_state_once if state_once else self.up
        return up(program=program, continue_on_error=True, **kwargs)

    def up_writing_state_once(self, **kwargs: Any) -> auto.UpResult:
        """`pulumi up` that writes the stack's state at its end only (`STATE_ONCE_ENVIRONMENT`:
        the caller keeps its own record of what the `up` may make)."""
        with self._writing_state_once():
            return self.up(**kwargs)

    @contextmanager
    def _writing_state_once(self) -> Iterator[None]:
        # The environment every workspace shares, with the operation's own variable on top
        # for this one process; the caller holds the pool's lock, so no other command of
        # this workspace runs meanwhile.
        shared = self.workspace.env_vars
        self.workspace.env_vars = {**shared, **STATE_ONCE_ENVIRONMENT}
        try:
            yield
        finally:
            self.workspace.env_vars = shared

    def _run_pulumi_cmd_sync(
        self,
        args: list[str],
        on_output: auto.OnOutput | None = None,
        on_error: auto.OnOutput | None = None,
    ) -> auto.CommandResult:
        if self._remove_after_destroy and args[:1] == ["destroy"]:
            # Right after the subcommand: the SDK may end the list with a `--` separator.
            args = [args[0], "--remove", *args[1:]]
        return super()._run_pulumi_cmd_sync(args, on_output, on_error)

    def outputs(self) -> auto.OutputMap:
        if self._answering is None:
            return super().outputs()
        events, _ = self._answering
        # A pool's outputs hold no secret (stacks.outputs), so none is masked here.
        return {
            key: auto.OutputValue(value=value, secret=False)
            for key, value in (events.stack_outputs or {}).items()
        }

    def info(self, show_secrets: bool = True) -> auto.UpdateSummary | None:
        if self._answering is None:
            return super().info(show_secrets)
        events, started = self._answering
        changes: Any = dict(events.changes)
        return auto.UpdateSummary(
            kind=events.operation,
            start_time=started,
            end_time=datetime.now(UTC),
            message="",
            environment={},
            config={},
            # The SDK asks only after the CLI process exited 0.
            result="succeeded",
            resource_changes=changes,
        )


def noop_program() -> None:
    """Destroy and refresh read the state, not the program; an inline no-op keeps the CLI
    from looking for a Python language plugin it does not need."""
