"""`PoolStacks`: the one door from the controllers to a pool's Pulumi stack.

The GangNodePool reconciler (through ``controllers.ports.StackOps``) and the composition
root are its only users. It takes a `PoolSpec` in, hands typed `PoolOutputs` back, and
lets exactly one exception out: `StackError`, whose ``kind`` (a `FailureKind`) says
whether waiting helps. Anything else the driver or the state read raises is classified
here, so a caller never guesses a failure's kind from its type or its text.

Every call is timed and reported to a `StackObserver` (the controller's
``atomic_gang_stack_operation_seconds`` histogram) with its operation — ``read`` (outputs,
and prepare's check that nothing changed), ``prepare``, ``record``, ``remove``, ``destroy``,
``recover`` — and its result: ``succeeded``, or the failure's `FailureKind`.

The spec, the outputs and `pool_spec_for` are re-exported: callers above this room never
import ``stacks`` themselves (an import contract checks it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from provisioner.api.constants import FailureKind
from provisioner.pulumi_driver.driver import StackDriver
from provisioner.pulumi_driver.errors import StackError, classify
from stacks.launch_template import launch_template_request
from stacks.outputs import PoolOutputs
from stacks.spec import PoolLookups, PoolSpec, pool_spec_for

__all__ = [
    "SUCCEEDED",
    "FailureKind",
    "PoolLookups",
    "PoolOutputs",
    "PoolSpec",
    "PoolStacks",
    "PreparedStack",
    "StackError",
    "StackObserver",
    "launch_template_request",
    "pool_spec_for",
]

T = TypeVar("T")

SUCCEEDED = "succeeded"


@dataclass(frozen=True)
class PreparedStack:
    """What a prepare left: the stack's outputs, and what it remade of the pool's resources
    after they were deleted outside the stack (one sentence each; empty when nothing was)."""

    outputs: PoolOutputs
    repairs: tuple[str, ...] = ()


class StackObserver(Protocol):
    """Hears every call through the port; called after it ends, with no lock held."""

    def finished(self, operation: str, result: str, seconds: float) -> None:
        """``result`` is "succeeded" or the failure's kind (a `FailureKind` value)."""


class PoolStacks:
    """Every pool's stack, as the reconciler sees it. Calls for one pool are serialized by
    the caller (one reconcile per pool at a time) and by the driver's per-stack lock."""

    def __init__(self, driver: StackDriver, observer: StackObserver) -> None:
        self.driver = driver
        self._observer = observer

    def is_prepared(self, pool: str) -> bool:
        """Whether the stack holds the pool's prerequisites — cheap, runs no CLI."""
        return self._call(pool, "read", lambda: self.driver.outputs(pool)) is not None

    def outputs(self, pool: str) -> PoolOutputs | None:
        """What the pool's stack holds, or None while it is not prepared."""
        return self._call(pool, "read", lambda: self.driver.outputs(pool))

    def holds(self, pool: str) -> bool:
        """Whether the backend holds a stack for the pool, prepared or not."""
        return self._call(pool, "read", lambda: self.driver.holds(pool))

    def prepare(self, spec: PoolSpec, *, refresh_first: bool = False) -> PreparedStack:
        """The pool's infrastructure as ``spec`` says; no `up` when it already is, unless
        ``refresh_first``: a launch met a resource of the stack that AWS no longer has, so
        the stack is refreshed and the resource made again."""

        def unchanged() -> PoolOutputs | None:
            return None if self.driver.needs_prepare(spec) else self.driver.outputs(spec.pool)

        if not refresh_first:
            # Timed as a read when nothing changes, so `prepare` times only real updates.
            current = self._call(spec.pool, "read", unchanged)
            if current is not None:
                return PreparedStack(current)

        def prepare() -> PreparedStack:
            result = self.driver.prepare(spec, refresh_first=refresh_first)
            return PreparedStack(result.outputs, result.repairs)

        return self._call(spec.pool, "prepare", prepare)

    def record_instance_set(self, pool: str, group: str, instance_ids: Sequence[str]) -> None:
        self._call(
            pool, "record", lambda: self.driver.record_instance_set(pool, group, instance_ids)
        )

    def remove_instance_set(self, pool: str) -> None:
        self._call(pool, "remove", lambda: self.driver.remove_instance_set(pool))

    def destroy(self, pool: str) -> None:
        self._call(pool, "destroy", lambda: self.driver.destroy(pool))

    def recover(self) -> None:
        """On leading: cancel locks whose holder cannot still write, resolve pending
        operations (new leader only)."""
        self._call("*", "recover", self.driver.recover)

    def step_down(self) -> None:
        """Leadership lost: the driver's fence closes, killing running CLIs; from now on
        no stack is written and no lock broken."""
        self.driver.step_down()

    def _call(self, pool: str, operation: str, body: Callable[[], T]) -> T:
        started = time.monotonic()
        result = SUCCEEDED
        try:
            return body()
        except StackError as failed:
            result = failed.kind.value
            raise
        except Exception as exc:
            # A state read or a program build that failed before the CLI ran; the driver's
            # own failures are already StackErrors.
            err = classify(exc, (), pool=pool, operation=operation)
            result = err.kind.value
            raise err from exc
        finally:
            self._observer.finished(operation, result, time.monotonic() - started)
