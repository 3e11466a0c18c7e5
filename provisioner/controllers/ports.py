"""The two outside systems the pool reconciler and the reaper drive, as small interfaces.

`EngineOps` is the part of `provisioner.cloud.Ec2Engine` they call, declared once in
`provisioner.cloud.engine_ops` and re-exported here; `StackOps` is the stack room's port
(`provisioner.pulumi_driver.port.PoolStacks`): a `PoolSpec` in, typed `PoolOutputs` out,
and `StackError` with a `FailureKind` as the only failure. Production
passes the real objects; tests pass the same real objects against the emulator and a file
backend, or small fakes for pure logic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from provisioner.cloud.engine_ops import EngineOps
from provisioner.pulumi_driver.port import PoolOutputs, PoolSpec, PreparedStack

__all__ = ["EngineOps", "StackOps"]


class StackOps(Protocol):
    """One pool's Pulumi stack. Every call is serialized per pool by the caller; every
    failure is a `StackError` carrying its `FailureKind`."""

    def is_prepared(self, pool: str) -> bool:
        """Whether the stack holds the pool's prerequisites — cheap, runs no CLI."""
        ...

    def outputs(self, pool: str) -> PoolOutputs | None: ...

    def holds(self, pool: str) -> bool:
        """Whether the backend holds a stack for the pool, prepared or not (a first `up`
        that failed partway keeps what it made, with no outputs) — cheap, runs no CLI."""
        ...

    def prepare(self, spec: PoolSpec, *, refresh_first: bool = False) -> PreparedStack:
        """``refresh_first``: a launch met a resource of the stack gone from AWS; the
        stack is refreshed and the resource made again (said in `PreparedStack.repairs`)."""
        ...

    def record_instance_set(self, pool: str, group: str, instance_ids: Sequence[str]) -> None: ...

    def remove_instance_set(self, pool: str) -> None: ...

    def destroy(self, pool: str) -> None: ...

    def recover(self) -> None:
        """On leading: cancel locks whose holder cannot still write, resolve pending
        operations (new leader only)."""
        ...

    def step_down(self) -> None:
        """Leadership lost: running stack operations are killed; from now on no stack is
        written and no lock broken."""
        ...
