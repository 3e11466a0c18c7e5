"""The pool life cycle's vocabulary: what `pool_plan` reads and names, and what actions report.

`PoolView` is everything one pass observed of a pool, gathered before planning (`plan` does
no I/O); `Step` is the one thing the pass does next; `ActionResult` is what that thing
reported, which `pool_outcomes` turns into the next status. `PoolTimings` holds the waits
the life cycle uses, read from Settings in one place.

Used by `pool_plan`, `pool_outcomes`, the GangNodePool reconciler and its actions, and the
stack executor (which orders stack steps by `stack_priority`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum, IntEnum

from provisioner.api.constants import FailureKind, Phase
from provisioner.api.gangnodepool import (
    CapacityBlock,
    GangNodePoolSpec,
    GangNodePoolStatus,
    UnusableNode,
)
from provisioner.api.settings import Settings


class Action(Enum):
    NONE = "none"
    PREPARE_STACK = "prepare"  # create/update launch template, profile, access entry
    LAUNCH = "launch"  # N-or-0 through the engine, with the marker's ClientToken
    RECORD_SET = "record"  # record the launched IDs in the stack
    RELEASE_SET = "release-set"  # terminate the active set (and strays) + ENI cleanup
    DESTROY_STACK = "destroy"  # stack destroy: the pool's release
    TAG_KEEP_WARM = "tag-keep-warm"  # mirror keepWarmUntil onto the instances' tag
    REMOVE_FINALIZER = "remove-finalizer"


# Actions that run on the stack executor, apart from the pass that plans them.
STACK_ACTIONS = frozenset(
    {Action.PREPARE_STACK, Action.RECORD_SET, Action.RELEASE_SET, Action.DESTROY_STACK}
)


class ReleasePurpose(Enum):
    """Why a RELEASE_SET runs, which decides what its success leaves."""

    # Instances of the pool that no set owns: the active set, if any, stays as it is.
    STRAYS = "strays"
    # The active set (and whatever else of the pool runs): the pool acquires again if it
    # is still claimed, and goes idle otherwise.
    ACTIVE_SET = "active-set"


class StackPriority(IntEnum):
    """Which stack operation the executor runs first (lowest first; FIFO within one)."""

    # A set is billing: its record runs beside the join, and its release lets the gang be
    # acquired again. Each is a pool somebody is waiting on, mid-acquisition.
    ACTIVE_SET = 0
    # A pool about to acquire (a new pool, or a changed launch template).
    PREPARE = 1
    # Nothing waits on a release but the bill, which the set's release already ended or
    # the reaper bounds.
    DESTROY = 2


def stack_priority(action: Action) -> StackPriority:
    if action is Action.PREPARE_STACK:
        return StackPriority.PREPARE
    if action is Action.DESTROY_STACK:
        return StackPriority.DESTROY
    return StackPriority.ACTIVE_SET


@dataclass(frozen=True)
class PoolTimings:
    """The waits of the pool life cycle, from Settings (`from_settings`) and nowhere else."""

    join_deadline: timedelta
    backoff_base: timedelta
    backoff_max: timedelta
    # EC2 warns 40 minutes before a Capacity Block ends and starts terminating 10 minutes
    # later; the gang is released before that, so its Workload hears it from us first.
    block_release_margin: timedelta
    # How long a released pool keeps its prepared stack for the next claim (0: destroyed
    # with the set).
    idle_stack_ttl: timedelta

    @classmethod
    def from_settings(cls, settings: Settings) -> PoolTimings:
        return cls(
            join_deadline=timedelta(seconds=settings.join_deadline_seconds),
            backoff_base=settings.retry_backoff.initial,
            backoff_max=settings.retry_backoff.max,
            block_release_margin=timedelta(seconds=settings.capacity_block_release_seconds),
            idle_stack_ttl=settings.stack_operations.idle_stack_ttl,
        )

    def backoff(self, attempts: int) -> float:
        """Seconds before try `attempts + 1`: doubling from the base, capped at the max."""
        base, cap = self.backoff_base.total_seconds(), self.backoff_max.total_seconds()
        return float(min(cap, base * (2 ** max(attempts - 1, 0))))

    @property
    def config_delay(self) -> float:
        """Seconds before a configuration failure is tried again: somebody has to fix
        something first, so it waits longer than a first retry and less than the cap."""
        return self.backoff_max.total_seconds() / 5


@dataclass(frozen=True)
class Instance:
    """What the pool reconciler needs of a live EC2 instance."""

    instance_id: str
    group: str | None


@dataclass(frozen=True)
class Backoff:
    """A step that failed is not tried again before `until`: the wait its result asked for.

    The failure's own status write wakes the pool at once, so the wait must be kept apart
    from the requeue that asked for it, or every failure would be retried immediately."""

    action: Action
    until: datetime


@dataclass(frozen=True)
class PoolView:
    """Everything `plan` reads, gathered by the pass before it plans.

    `stack_prepared` is gathered only for the passes whose plan reads it (`needs_stack`
    in `pool_plan` says which): asking may run the Pulumi CLI (a replica that has not seen
    the stack, or a backend that failed the last read), and a pool that is joining or
    settled must not wait on that. It is None when it was not gathered."""

    name: str
    uid: str
    spec: GangNodePoolSpec
    status: GangNodePoolStatus
    deleting: bool
    has_finalizer: bool
    live: tuple[Instance, ...]
    # IDs EC2 explicitly reports as shutting down, terminated or stopped. An ID merely absent
    # from a describe is not gone: EC2 is eventually consistent right after a launch.
    gone_ids: frozenset[str]
    ready_instance_ids: frozenset[str]  # Ready Nodes labelled with this pool and active group
    now: datetime
    timings: PoolTimings
    # Whether the stack is prepared (from today's inputs, for a launch).
    stack_prepared: bool | None = None
    # The pool's stack operation queued or running on the executor, if any.
    stack_operation: Action | None = None
    # The last failed step and when it may run again (the reconciler remembers it).
    backoff: Backoff | None = None
    # EC2's record of the Capacity Block the spec names, read by a pass that may launch
    # (None: not a block, or not read this pass).
    capacity_block: CapacityBlock | None = None
    # Nodes among `ready_instance_ids` that cannot run one gang pod yet, and why
    # (`pool.usable`): a set is whole only once none is left (see `usable_ids`).
    unusable: tuple[UnusableNode, ...] = ()

    def usable_ids(self) -> frozenset[str]:
        """The Ready nodes that count toward the gang. A Satisfied set's nodes were each
        usable when it was Satisfied, and stay counted while Ready, as Karpenter's
        Initialized stays set: a device plugin restarting on a running gang's node (its
        resources leave the allocatable for a moment) must not take the gang away."""
        if self.status.phase == Phase.SATISFIED:
            return self.ready_instance_ids
        return self.ready_instance_ids - {u.instance_id for u in self.unusable}

    def unusable_nodes(self) -> tuple[UnusableNode, ...] | None:
        """What the status says of the nodes `usable_ids` leaves out (None: none)."""
        if self.status.phase == Phase.SATISFIED:
            return None
        return self.unusable or None

    @property
    def prepared(self) -> bool:
        if self.stack_prepared is None:
            raise AssertionError(
                f"pool {self.name}: the plan read the stack in phase {self.status.phase}, "
                "but the pass did not gather it (see pool_plan.needs_stack)"
            )
        return self.stack_prepared


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Step:
    action: Action
    status: GangNodePoolStatus  # persisted before the action runs
    requeue_after: float | None = None
    events: tuple[Event, ...] = ()
    release_ids: tuple[str, ...] = ()  # for RELEASE_SET
    release_purpose: ReleasePurpose | None = None  # for RELEASE_SET
    # For PREPARE_STACK: refresh the stack first (a launch met a resource of it gone).
    refresh_stack: bool = False
    why: str = ""  # for the log only; decisions read the fields above


@dataclass(frozen=True)
class ActionResult:
    """What an action reports back; `failure` is the engine's or the driver's kind."""

    ok: bool
    instance_ids: tuple[str, ...] = ()
    failure: FailureKind | None = None
    reason: str = ""
    message: str = ""
    # A reservation that has not started: when it starts (None: EC2 did not say).
    starts_at: datetime | None = None
    # The Capacity Block a launched set runs on: when it ends.
    block_ends_at: datetime | None = None
    # What a prepare made again after it was deleted outside the stack, one sentence each.
    repairs: tuple[str, ...] = ()
    # A failed launch's instances EC2 has not yet shown terminating (a rollback it could
    # not confirm): kept in the status and released by the next pass, never forgotten.
    unreleased_ids: tuple[str, ...] = ()
    # A failed launch's instances its rollback terminated: released by id on the next pass
    # too, for the ENIs a node that joined before the rollback leaves behind.
    rolled_back_ids: tuple[str, ...] = ()
