"""`PoolStacks`: the one door from the controllers to a pool's Pulumi stack.

The GangNodePool reconciler (through ``controllers.ports.StackOps``) and the composition
root are its only users. It takes a `PoolSpec` in, hands typed `PoolOutputs` back, and
lets exactly one exception out: `StackError`, whose ``kind`` (a `FailureKind`) says
whether waiting helps. Anything else the driver or the state read raises is classified
here, so a caller never guesses a failure's kind from its type or its text.

The spec, the outputs and `pool_spec_for` are re-exported: callers above this room never
import ``stacks`` themselves (an import contract checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from provisioner.api.constants import FailureKind
from provisioner.pulumi_driver.driver import StackDriver
from provisioner.pulumi_driver.errors import StackError, classify
from stacks.outputs import PoolOutputs
from stacks.spec import PoolSpec, pool_spec_for

__all__ = ["FailureKind", "PoolOutputs", "PoolSpec", "PoolStacks", "StackError", "pool_spec_for"]

T = TypeVar("T")


class PoolStacks:
    """Every pool's stack, as the reconciler sees it. Calls for one pool are serialized by
    the caller (one reconcile per pool at a time) and by the driver's per-stack lock."""

    def __init__(self, driver: StackDriver) -> None:
        self.driver = driver

    def is_prepared(self, pool: str) -> bool:
        """Whether the stack holds the pool's prerequisites — cheap, runs no CLI."""
        return self._call(pool, "read", lambda: self.driver.outputs(pool)) is not None

    def outputs(self, pool: str) -> PoolOutputs | None:
        """What the pool's stack holds, or None while it is not prepared."""
        return self._call(pool, "read", lambda: self.driver.outputs(pool))

    def prepare(self, spec: PoolSpec) -> PoolOutputs:
        """The pool's infrastructure as ``spec`` says; no `up` when it already is."""

        def run() -> PoolOutputs:
            if self.driver.needs_prepare(spec):
                return self.driver.prepare(spec).outputs
            current = self.driver.outputs(spec.pool)
            assert current is not None  # needs_prepare said the stack holds spec
            return current

        return self._call(spec.pool, "prepare", run)

    def record_instance_set(self, pool: str, group: str, instance_ids: Sequence[str]) -> None:
        self._call(
            pool, "record", lambda: self.driver.record_instance_set(pool, group, instance_ids)
        )

    def remove_instance_set(self, pool: str) -> None:
        self._call(pool, "remove", lambda: self.driver.remove_instance_set(pool))

    def destroy(self, pool: str) -> None:
        self._call(pool, "destroy", lambda: self.driver.destroy(pool))

    def recover(self) -> None:
        """After a crash: cancel stale locks, resolve pending operations (new leader only)."""
        self._call("*", "recover", self.driver.recover)

    def step_down(self) -> None:
        """Leadership lost: from now on break no stack lock (the new leader's)."""
        self.driver.step_down()

    @staticmethod
    def _call(pool: str, operation: str, body: Callable[[], T]) -> T:
        try:
            return body()
        except StackError:
            raise
        except Exception as exc:
            # A state read or a program build that failed before the CLI ran; the driver's
            # own failures are already StackErrors.
            raise classify(exc, (), pool=pool, operation=operation) from exc
