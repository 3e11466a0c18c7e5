"""What the stack driver hands back: an operation's result, a stack's recovery, a listing.

Built by `StackDriver` (``driver``) and its recovery (``recovery``); read by the stack port
(``port``), `atomic-gang pools` and the tests. Plain frozen records, no behaviour beyond
what they say about themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from provisioner.pulumi_driver import oplog
from provisioner.pulumi_driver.pending import Resolution
from stacks.outputs import PoolOutputs

__all__ = ["RecoveryReport", "StackResult", "StackSummary"]


@dataclass(frozen=True)
class StackResult:
    """An operation that left the stack holding ``outputs``."""

    operation: oplog.StackOperation
    outputs: PoolOutputs
    changes: dict[str, int] = field(default_factory=dict)
    # What the operation repaired: one sentence per resource deleted outside the stack and
    # made again (``drift``); empty when nothing had drifted.
    repairs: tuple[str, ...] = ()


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
