"""The pool life cycle's vocabulary: what `plan` reads and names, and what actions report.

`PoolView` is everything one pass observed of a pool, gathered before planning (`plan` does
no I/O), typed by what its phase's row read (`StackRead`, `LaunchRead`, or `NotFetched`);
`Step` is the one thing the pass does next; `ActionResult` is what that thing reported,
which `outcomes` turns into the next status. `PoolTimings` holds the waits the life cycle
uses, read from Settings in one place.

Used by `plan` and its phases' planners, `outcomes`, the GangNodePool reconciler and its
actions, and the stack executor (which orders stack steps by `stack_priority`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum, IntEnum
from typing import Generic, TypeAlias, TypeVar

from provisioner.api.constants import FailureKind, Phase
from provisioner.api.gangnodepool import (
    CapacityBlock,
    GangNodePoolSpec,
    GangNodePoolStatus,
    UnusableNode,
)
from provisioner.api.settings import Settings
from provisioner.cloud.stack_gone import StackResource
from provisioner.controllers.pool.purchase import PurchaseRead


class Action(Enum):
    NONE = "none"
    PREPARE_STACK = "prepare"  # create/update launch template, profile, access entry
    LAUNCH = "launch"  # N-or-0 through the engine, with the marker's ClientToken
    RECORD_SET = "record"  # record the launched IDs in the stack
    RELEASE_SET = "release-set"  # terminate the active set (and strays) + ENI cleanup
    DESTROY_STACK = "destroy"  # stack destroy: the pool's release
    TAG_KEEP_WARM = "tag-keep-warm"  # mirror keepWarmUntil onto the instances' tag
    # PurchaseCapacityBlock, in one attempt, after the intent is in the status (`plan_purchase`)
    PURCHASE_BLOCK = "purchase"
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

    # A set is going (broken, past its deadline or its block, released): its release ends
    # the bill and lets the gang be acquired again.
    RELEASE = 0
    # A pool about to acquire (a new pool, or a changed launch template): a gang waits for
    # its launch, which waits for this.
    PREPARE = 1
    # The set's record in the stack is bookkeeping: it never gates Ready (a release goes
    # by the status's IDs and the tags), so in a wave of cold gangs every launch's prepare
    # goes before it. Queued, it gives way to another stack step of its pool (`GIVES_WAY`).
    RECORD = 2
    # Nothing waits on a destroy but the bill, which the set's release already ended or
    # the reaper bounds.
    DESTROY = 3


_PRIORITIES = {
    Action.RELEASE_SET: StackPriority.RELEASE,
    Action.PREPARE_STACK: StackPriority.PREPARE,
    Action.RECORD_SET: StackPriority.RECORD,
    Action.DESTROY_STACK: StackPriority.DESTROY,
}

# The stack steps that do not hold their pool while queued: the pool is planned as without
# them (its plain status changes and the keep-warm tag go ahead), and a stack step it needs
# instead (a broken set's release, its deletion's destroy) withdraws them before they start.
# One that waits its turn behind every prepare must not hold a release back.
GIVES_WAY = frozenset({Action.RECORD_SET})


def stack_priority(action: Action) -> StackPriority:
    return _PRIORITIES[action]


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
            join_deadline=settings.join_deadline,
            backoff_base=settings.retry_backoff.initial,
            backoff_max=settings.retry_backoff.max,
            block_release_margin=settings.capacity_block_release,
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
    # Its keep-warm tag as the listing read it (None: empty, or not a time).
    keep_warm_until: datetime | None = None


@dataclass(frozen=True)
class Unproven:
    """A live instance tagged as the pool's, in no set of it, that EC2's record does not
    prove ours (`ownership.prove`): never released, only reported (`pool.proofs`)."""

    instance_id: str
    reason: str  # `ownership.NO_LAUNCH_TOKEN`, `TOKEN_NOT_OURS`, ...


@dataclass(frozen=True)
class Backoff:
    """A step that failed is not tried again before `until`: the wait its result asked for.

    The failure's own status write wakes the pool at once, so the wait must be kept apart
    from the requeue that asked for it, or every failure would be retried immediately."""

    action: Action
    until: datetime


class NotFetched:
    """What a view holds of an input its phase's row does not read (`phases.PHASES`). It
    has no fields: a planner that reads the stack or the launch facts of a view that did not
    fetch them fails type checking, not a run."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_FETCHED"


NOT_FETCHED = NotFetched()


@dataclass(frozen=True)
class StackRead:
    """The pool's stack as this pass read it: whether it is prepared (from today's inputs,
    for a launch; see `facts.stack_holds_what_launch_needs`), and whether the backend holds
    an unprepared one (`partial`: a first `up` that failed partway, holding what it made,
    which only a destroy removes)."""

    prepared: bool
    partial: bool = False


@dataclass(frozen=True)
class LaunchRead:
    """What the plan reads of the launch facts (cluster, AMI, type, reservation) a pass
    that may launch gathers: EC2's record of the Capacity Block the spec names (None: not
    a block, or the read failed; the status's record stands in), and the ClientTokens the
    pass's launch would send EC2, in order (`EngineOps.launch_tokens`; none when the read
    failed), which the launch marker records."""

    capacity_block: CapacityBlock | None
    tokens: tuple[str, ...] = ()
    # What the pass read to buy a Capacity Block (`purchase.read_purchase`); None: the pool
    # buys nothing this pass (no gang asks for time, it has its block, or buying is off).
    purchase: PurchaseRead | None = None


# What a view holds of the stack and of the launch facts: the row's read, or NotFetched.
S = TypeVar("S", covariant=True)
L = TypeVar("L", covariant=True)


@dataclass(frozen=True)
class PoolView(Generic[S, L]):
    """Everything `plan` reads, gathered by the pass before it plans.

    `stack` and `launch` hold what the row of the pool's phase fetches (`phases.PHASES`),
    typed so: a `PoolView[NotFetched, NotFetched]` has neither to read. Asking the stack
    may run the Pulumi CLI (a replica that has not seen the stack, or a backend that
    failed the last read), and a pool that is joining or settled must not wait on that."""

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
    stack: S  # StackRead, or NotFetched
    launch: L  # LaunchRead, or NotFetched
    # The pool's stack operation queued or running on the executor, if any.
    stack_operation: Action | None = None
    # The last failed step and when it may run again (the reconciler remembers it).
    backoff: Backoff | None = None
    # Nodes among `ready_instance_ids` that cannot run one gang pod yet, and why
    # (`pool.usable`): a set is whole only once none is left (see `usable_ids`).
    unusable: tuple[UnusableNode, ...] = ()
    # Tagged as the pool's, in no set, and not proven ours: left out of `live`, so no
    # release names them (`pool.proofs`); the pass reports them.
    unproven: tuple[Unproven, ...] = ()
    # The keep-warm window this reconciler last wrote onto the set's tag, in memory (a
    # listing may predate the write); None after a restart, when the listing tells.
    keep_warm_tagged: datetime | None = None

    def usable_ids(self) -> frozenset[str]:
        """The Ready nodes that count toward the gang. A Satisfied set's nodes were each
        usable when it was Satisfied, and stay counted while Ready, as Karpenter's
        Initialized stays set: a device plugin restarting on a running gang's node (its
        resources leave the allocatable for a moment) must not take the gang away."""
        if self.status.phase is Phase.SATISFIED:
            return self.ready_instance_ids
        return self.ready_instance_ids - {u.instance_id for u in self.unusable}

    def unusable_nodes(self) -> tuple[UnusableNode, ...] | None:
        """What the status says of the nodes `usable_ids` leaves out (None: none)."""
        if self.status.phase is Phase.SATISFIED:
            return None
        return self.unusable or None


# A view whatever its row fetched: for code that reads neither the stack nor the launch facts.
AnyView: TypeAlias = PoolView[object, object]


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
    # A launch EC2 refused because a resource of the pool's stack is missing: which one.
    gone: StackResource | None = None
    # EC2 answered RequestLimitExceeded (or another throttle): the launch budget shrinks.
    throttled: bool = False
    # The Capacity Block a purchase bought.
    reservation_id: str | None = None
    # The launch calls (RunInstances/CreateFleet) the action sent; None: not known.
    calls: int | None = None
