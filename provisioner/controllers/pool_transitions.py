"""The GangNodePool life cycle as pure functions: what to do next, and what it leaves behind.

`plan(view)` looks at one pool (spec, status), what EC2 and the Nodes show for it, and the
time, and names ONE step: an action with an external effect (prepare the stack, launch,
record the set in the stack, release a set, destroy the stack, mirror keep-warm to EC2) or a
plain status change. `outcome(view, step, result)` says what status that step's result
leaves. `gangnodepool.py` runs the step between the two status writes, so every external
effect is bracketed: a marker persisted before it (for a launch: the ClientToken and group),
the result persisted right after. A crash anywhere leaves either the marker, which the next
pass resumes with the same token, or the result.

Stack steps (`STACK_ACTIONS`) run on the stack executor, apart from the pass: their marker
is persisted before they are submitted, and their result by the pass the executor queues
when they end. While one runs (`PoolView.stack_operation`), `plan` lets only plain status
changes through, and `settle` applies its result to the status the pool has reached by then.

Phases: Idle → Acquiring → Joining → Satisfied → KeepWarm → Releasing → Idle, and
KeepWarm → Satisfied on a new claim (the warm set is reused, no launch). N-or-0 holds
throughout: a set that loses any instance, or misses the join deadline, is released whole
before the next generation is acquired.

Reserved capacity adds two timed transitions. A Capacity Block that has not started holds
the pool in Acquiring at $0 (no launch, no shortfall counted, the generation stays) until
its start, with a message giving it. A set on a block is released `block_release_margin`
before the block's end — EC2 reclaims the instances then — with a message saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum, IntEnum
from functools import cached_property

from provisioner.api import constants as c
from provisioner.api.durations import format_duration
from provisioner.api.gangnodepool import (
    GangNodePoolSpec,
    GangNodePoolStatus,
    LastError,
    LaunchInProgress,
    ReleaseInProgress,
)
from provisioner.cloud.naming import group_name


class Action(Enum):
    NONE = "none"
    PREPARE_STACK = "prepare"  # create/update launch template, profile, access entry
    LAUNCH = "launch"  # N-or-0 through the engine, with the marker's ClientToken
    RECORD_SET = "record"  # record the launched IDs in the stack
    RELEASE_SET = "release-set"  # terminate the active set (and strays) + ENI cleanup
    DESTROY_STACK = "destroy"  # stack destroy: the pool's release
    TAG_KEEP_WARM = "tag-keep-warm"  # mirror keepWarmUntil onto the instances' tag
    REMOVE_FINALIZER = "remove-finalizer"


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
    """Everything `plan` reads. Instances are the pool's live ones in EC2, found by tag."""

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
    # Whether the stack is prepared (from today's inputs, for a launch); read through
    # `stack_prepared`, only by the plans that need it. Asking may run the Pulumi CLI (a
    # replica that has not seen the stack, or a backend that failed the last read), and the
    # reconcile worker must not wait on that for a pool that is joining or settled.
    stack_probe: Callable[[], bool]
    now: datetime
    join_deadline: timedelta
    backoff_base: float = 5.0
    backoff_max: float = 300.0
    # EC2 warns 40 minutes before a Capacity Block ends and starts terminating 10 minutes
    # later; the gang is released before that, so its Workload hears it from us first.
    block_release_margin: timedelta = timedelta(minutes=35)
    # The pool's stack operation queued or running on the executor, if any.
    stack_operation: Action | None = None
    # How long a released pool keeps its prepared stack for the next claim (0: destroyed
    # with the set).
    idle_stack_ttl: timedelta = timedelta(days=7)
    # The last failed step and when it may run again (the reconciler remembers it).
    backoff: Backoff | None = None

    @cached_property
    def stack_prepared(self) -> bool:
        return self.stack_probe()


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
    why: str = ""


@dataclass(frozen=True)
class ActionResult:
    """What an action reports back; `error_kind` is the engine's or the driver's."""

    ok: bool
    instance_ids: tuple[str, ...] = ()
    error_kind: str | None = None  # capacity | malformed | retryable | config | ...
    reason: str = ""
    message: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _backoff(view: PoolView, attempts: int) -> float:
    return float(min(view.backoff_max, view.backoff_base * (2 ** max(attempts - 1, 0))))


def _with(status: GangNodePoolStatus, **changes: object) -> GangNodePoolStatus:
    return status.model_copy(update=changes)


def _idle(status: GangNodePoolStatus) -> GangNodePoolStatus:
    return _with(
        status,
        phase=c.PHASE_IDLE,
        instance_ids=(),
        active_group=None,
        ready_nodes=0,
        keep_warm_until=None,
        capacity_block_ends_at=None,
        join_deadline=None,
        release_in_progress=None,
        launch_in_progress=None,
    )


def _held_ids(view: PoolView) -> tuple[str, ...]:
    """What a release must terminate: the status's set and whatever of the pool still runs."""
    return tuple(dict.fromkeys([*view.status.instance_ids, *(i.instance_id for i in view.live)]))


def _strays(view: PoolView) -> tuple[str, ...]:
    """Live instances of this pool that neither the active set nor an in-flight launch owns."""
    owned = set(view.status.instance_ids)
    marker = view.status.launch_in_progress
    return tuple(
        i.instance_id
        for i in view.live
        if i.instance_id not in owned and (marker is None or i.group != marker.group)
    )


# Actions that run on the stack executor, apart from the pass that plans them.
STACK_ACTIONS = frozenset(
    {Action.PREPARE_STACK, Action.RECORD_SET, Action.RELEASE_SET, Action.DESTROY_STACK}
)


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


def plan(view: PoolView) -> Step:
    step = _backing_off(view, _plan(view))
    if view.stack_operation is None:
        return step
    return _beside_stack_operation(view, step, view.stack_operation)


def _backing_off(view: PoolView, step: Step) -> Step:
    """A step that failed waits out its backoff; every other step goes ahead.

    Only the failed action waits: a record that keeps failing must not hold back the join
    deadline's release, nor a set becoming Ready. What the pass observed (the Ready count)
    is kept; the step's events come when it runs.
    """
    backoff = view.backoff
    if backoff is None or step.action is not backoff.action or view.now >= backoff.until:
        return step
    status = _with(view.status, ready_nodes=step.status.ready_nodes)
    wait = (backoff.until - view.now).total_seconds()
    return Step(Action.NONE, status, requeue_after=wait, why=f"backing off {step.action.value}")


def _beside_stack_operation(view: PoolView, step: Step, running: Action) -> Step:
    """While the pool's stack operation runs, only plain status changes go ahead.

    A launch reads the launch template a prepare may be changing; a release, a destroy or a
    record would be a second operation on the stack; the keep-warm tag and the finalizer
    wait too, rather than act on a set or stack that is changing under them. A pool being
    released or deleted decides its next status from the stack itself, so it waits whole.
    What remains observes: a set becoming Ready, or a node leaving, is written while its
    record runs (Ready is never gated on the record). The executor queues the pool again
    when the operation ends.
    """
    releasing = view.deleting or view.status.phase == c.PHASE_RELEASING
    if step.action is Action.NONE and not releasing:
        return step
    # Only the Ready count, which this pass observed, is kept of a step that waits.
    status = _with(view.status, ready_nodes=step.status.ready_nodes)
    return Step(Action.NONE, status, why=f"waiting for the stack's {running.value}")


def _plan(view: PoolView) -> Step:
    status = view.status
    if view.deleting:
        return _plan_delete(view)
    strays = _strays(view)
    if strays:
        return Step(
            Action.RELEASE_SET,
            _with(
                status, release_in_progress=_releasing(view, c.EventReason.STRAY_INSTANCES, strays)
            ),
            release_ids=strays,
            events=(
                Event(
                    c.EVENT_WARNING,
                    c.EventReason.STRAY_INSTANCES,
                    f"Terminating {len(strays)} instances "
                    f"of pool {view.name} that no set owns: {', '.join(strays)}.",
                ),
            ),
            why="strays",
        )
    phase = status.phase
    if phase == c.PHASE_IDLE:
        return _plan_idle(view)
    if phase == c.PHASE_ACQUIRING:
        return _plan_acquiring(view)
    if phase in (c.PHASE_JOINING, c.PHASE_SATISFIED):
        return _plan_active(view)
    if phase == c.PHASE_KEEP_WARM:
        return _plan_keep_warm(view)
    return _plan_releasing(view)


def _releasing(view: PoolView, reason: str, ids: Sequence[str]) -> ReleaseInProgress:
    return ReleaseInProgress(started_at=view.now, reason=reason, instance_ids=tuple(ids))


def _plan_delete(view: PoolView) -> Step:
    status = view.status
    if view.live or status.instance_ids or view.stack_prepared:
        return Step(
            Action.DESTROY_STACK,
            _with(
                status,
                phase=c.PHASE_RELEASING,
                release_in_progress=status.release_in_progress
                or _releasing(view, c.EventReason.POOL_DELETED, status.instance_ids),
            ),
            why="pool deleted",
        )
    if view.has_finalizer:
        return Step(Action.REMOVE_FINALIZER, _idle(status), why="released; finalizer off")
    return Step(Action.NONE, status)


def _plan_idle(view: PoolView) -> Step:
    if view.spec.claim is None:
        return _plan_idle_stack(view)
    status = _with(
        view.status,
        phase=c.PHASE_ACQUIRING,
        consecutive_shortfalls=0,
        last_error=None,
        idle_since=None,
    )
    return Step(
        Action.NONE,
        status,
        requeue_after=0.0,
        events=(
            Event(
                c.EVENT_NORMAL,
                c.EventReason.ACQUIRING,
                f"Acquiring {view.spec.count}x "
                f"{view.spec.instance_type} ({view.spec.mode}), all or nothing.",
            ),
        ),
    )


def _plan_idle_stack(view: PoolView) -> Step:
    """An unclaimed pool keeps its prepared stack (launch template, placement group; they
    cost nothing) so the next claim launches without a `pulumi up`, until it has been idle
    for `idle_stack_ttl`; then the stack is destroyed."""
    status = view.status
    if not view.stack_prepared:
        return Step(Action.NONE, status)
    since = status.idle_since
    if since is None:
        # Idle by a path that did not stamp it (a claim dropped mid-acquisition, a status
        # from before the stamp existed): the idle time starts now.
        return Step(
            Action.NONE,
            _with(status, idle_since=view.now),
            requeue_after=view.idle_stack_ttl.total_seconds(),
        )
    remaining = (since + view.idle_stack_ttl - view.now).total_seconds()
    if remaining > 0:
        return Step(Action.NONE, status, requeue_after=remaining)
    return Step(
        Action.DESTROY_STACK,
        _with(
            status,
            phase=c.PHASE_RELEASING,
            idle_since=None,
            release_in_progress=_releasing(view, c.EventReason.STACK_IDLE, ()),
        ),
        events=(
            Event(
                c.EVENT_NORMAL,
                c.EventReason.STACK_IDLE,
                f"Pool {view.name} idle since {since:%Y-%m-%dT%H:%M:%SZ}, past "
                f"stackOperations.idleStackTTL ({format_duration(view.idle_stack_ttl)}); "
                "destroying its stack.",
            ),
        ),
        why="stack idle",
    )


def _plan_acquiring(view: PoolView) -> Step:
    status, spec = view.status, view.spec
    marker = status.launch_in_progress
    if spec.claim is None and marker is None:
        return Step(Action.NONE, _idle(_with(status, consecutive_shortfalls=0)), why="claim gone")
    if not view.stack_prepared:
        return Step(Action.PREPARE_STACK, status, why="stack not prepared")
    if marker is None:
        group = group_name(status.acquire_generation)
        marker = LaunchInProgress(
            client_token=f"{view.uid}/{status.acquire_generation}"[:64],
            mode=spec.mode,
            group=group,
            started_at=view.now,
        )
    return Step(Action.LAUNCH, _with(status, launch_in_progress=marker), why="launch")


def _plan_active(view: PoolView) -> Step:
    status, spec, n = view.status, view.spec, view.spec.count
    missing = [iid for iid in status.instance_ids if iid in view.gone_ids]
    if missing or len(status.instance_ids) != n:
        return _release_for_retry(
            view,
            c.EventReason.GANG_BROKEN,
            f"{len(missing)} of {n} instances of "
            f"group {status.active_group} are gone ({', '.join(missing)}); "
            "releasing the rest and acquiring a whole new set.",
        )
    release_at = _block_release_at(view)
    if release_at is not None and view.now >= release_at:
        return _release_for_block_end(view)
    # Readiness and the join deadline come before the stack's record of the set: the record
    # is bookkeeping (a release terminates by the IDs in this status and by tag), so it never
    # gates Ready, and a record that keeps failing cannot hold a billing set past its deadline.
    recorded = status.last_stack_operation == f"record:{status.active_group}"
    ready = len(view.ready_instance_ids & set(status.instance_ids))
    status = _with(status, ready_nodes=ready)
    if status.phase == c.PHASE_SATISFIED and spec.claim is None:
        return _enter_keep_warm(view, status)
    if ready == n:
        if status.phase != c.PHASE_SATISFIED:
            return Step(
                Action.NONE,
                _with(status, phase=c.PHASE_SATISFIED, join_deadline=None, last_error=None),
                requeue_after=None if recorded else 0.0,
                events=(
                    Event(
                        c.EVENT_NORMAL,
                        c.EventReason.SATISFIED,
                        f"All {n} nodes of group {status.active_group} joined and are Ready.",
                    ),
                ),
            )
        if not recorded:
            return Step(Action.RECORD_SET, status, why="record set in stack")
        return Step(Action.NONE, status, requeue_after=_until(view, release_at))
    deadline = status.join_deadline or (view.now + view.join_deadline)
    if status.phase == c.PHASE_SATISFIED:
        # A node went away or NotReady: back to Joining, with a fresh deadline.
        return Step(
            Action.NONE,
            _with(status, phase=c.PHASE_JOINING, join_deadline=view.now + view.join_deadline),
            requeue_after=5.0,
            events=(
                Event(c.EVENT_WARNING, c.EventReason.NODE_NOT_READY, f"{ready}/{n} nodes Ready."),
            ),
        )
    if view.now >= deadline:
        return _release_for_retry(
            view,
            c.EventReason.JOIN_DEADLINE_EXCEEDED,
            f"Only {ready}/{n} nodes "
            f"joined within {view.join_deadline}; releasing the set and "
            "acquiring a new one.",
        )
    status = _with(status, join_deadline=deadline)
    if not recorded:
        # While the nodes join: the record runs beside the join.
        return Step(Action.RECORD_SET, status, why="record set in stack")
    wait = (deadline - view.now).total_seconds()
    return Step(Action.NONE, status, requeue_after=min(wait, 5.0))


def _block_release_at(view: PoolView) -> datetime | None:
    ends = view.status.capacity_block_ends_at
    return None if ends is None else ends - view.block_release_margin


def _until(view: PoolView, moment: datetime | None) -> float | None:
    return None if moment is None else max((moment - view.now).total_seconds(), 0.0)


def _block_ending_message(view: PoolView) -> str:
    ends = view.status.capacity_block_ends_at
    assert ends is not None
    return (
        f"Capacity Block {view.spec.capacity_reservation_id} (group "
        f"{view.status.active_group}) ends at {ends:%Y-%m-%dT%H:%M:%SZ} and EC2 reclaims its "
        f"instances then; releasing the {view.spec.count} nodes {view.block_release_margin} "
        "before its end. Buy or extend a block to run longer."
    )


def _release_for_block_end(view: PoolView) -> Step:
    message = _block_ending_message(view)
    step = _release_for_retry(view, "CapacityBlockEnding", message)
    err = LastError(reason="CapacityBlockEnding", message=message)
    return replace(step, status=_with(step.status, last_error=err))


def _enter_keep_warm(view: PoolView, status: GangNodePoolStatus) -> Step:
    ttl = view.spec.keep_warm_ttl
    if ttl <= timedelta(0):
        return Step(Action.NONE, _with(status, phase=c.PHASE_RELEASING), requeue_after=0.0)
    until = view.now + ttl
    block_wait = _until(view, _block_release_at(view))
    wait = ttl.total_seconds() if block_wait is None else min(ttl.total_seconds(), block_wait)
    return Step(
        Action.TAG_KEEP_WARM,
        _with(status, phase=c.PHASE_KEEP_WARM, keep_warm_until=until),
        requeue_after=wait,
        events=(
            Event(
                c.EVENT_NORMAL,
                c.EventReason.KEEP_WARM,
                f"Claim dropped; keeping {view.spec.count} nodes "
                f"warm until {until:%Y-%m-%dT%H:%M:%SZ}.",
            ),
        ),
    )


def _plan_keep_warm(view: PoolView) -> Step:
    status = view.status
    if view.spec.claim is not None:
        # A new claimant reuses the warm set: no launch. A whole set of Ready nodes is
        # Satisfied in this one step (its record stands: the set is the one recorded); one
        # that lost readiness while warm goes back to Joining, under a fresh deadline.
        ready = len(view.ready_instance_ids & set(status.instance_ids))
        whole = ready == view.spec.count == len(status.instance_ids) and not view.gone_ids & set(
            status.instance_ids
        )
        back = _with(
            status,
            phase=c.PHASE_SATISFIED if whole else c.PHASE_JOINING,
            keep_warm_until=None,
            ready_nodes=ready,
            join_deadline=None if whole else view.now + view.join_deadline,
        )
        # No event of its own: the claim's ("Claimed by ...; reusing its warm nodes") says it,
        # and every warm claim of a wave would write a second Event saying the same.
        return Step(Action.TAG_KEEP_WARM, back, requeue_after=None if whole else 0.0)
    if any(iid in view.gone_ids for iid in status.instance_ids):
        return Step(Action.NONE, _with(status, phase=c.PHASE_RELEASING), requeue_after=0.0)
    release_at = _block_release_at(view)
    if release_at is not None and view.now >= release_at:
        return Step(
            Action.NONE,
            _with(status, phase=c.PHASE_RELEASING),
            requeue_after=0.0,
            events=(Event("Normal", "CapacityBlockEnding", _block_ending_message(view)),),
        )
    until = status.keep_warm_until
    if until is None or view.now >= until:
        return Step(
            Action.NONE,
            _with(status, phase=c.PHASE_RELEASING),
            requeue_after=0.0,
            events=(
                Event(
                    c.EVENT_NORMAL,
                    c.EventReason.KEEP_WARM_EXPIRED,
                    "Keep-warm window over; releasing.",
                ),
            ),
        )
    wait = (until - view.now).total_seconds()
    block_wait = _until(view, release_at)
    return Step(
        Action.NONE, status, requeue_after=wait if block_wait is None else min(wait, block_wait)
    )


def _plan_releasing(view: PoolView) -> Step:
    """The set is released and the prepared stack kept for the next claim (the idle TTL
    destroys it later); with `idle_stack_ttl` 0, the stack goes with the set."""
    status = view.status
    keep_stack = view.idle_stack_ttl > timedelta(0)
    if keep_stack and (view.live or status.instance_ids):
        ids = _held_ids(view)
        return Step(
            Action.RELEASE_SET,
            _with(
                status,
                release_in_progress=status.release_in_progress
                or _releasing(view, c.EventReason.RELEASED, ids),
            ),
            release_ids=ids,
            why="release set",
        )
    if not keep_stack and (view.live or status.instance_ids or view.stack_prepared):
        return Step(
            Action.DESTROY_STACK,
            _with(
                status,
                release_in_progress=status.release_in_progress
                or _releasing(view, c.EventReason.RELEASED, status.instance_ids),
            ),
            why="destroy stack",
        )
    idle_ttl = view.idle_stack_ttl.total_seconds()
    return Step(
        Action.NONE,
        _with(_idle(status), idle_since=view.now if view.stack_prepared else None),
        requeue_after=0.0 if view.spec.claim else (idle_ttl if view.stack_prepared else None),
        events=(
            Event(
                c.EVENT_NORMAL, c.EventReason.RELEASED, f"Pool {view.name} released; 0 instances."
            ),
        ),
    )


def _release_for_retry(view: PoolView, reason: str, message: str) -> Step:
    status = view.status
    ids = _held_ids(view)
    return Step(
        Action.RELEASE_SET,
        _with(status, release_in_progress=_releasing(view, reason, ids)),
        release_ids=ids,
        events=(Event(c.EVENT_WARNING, reason, message),),
        why=reason,
    )


# ActionResult.extra keys a launch fills in (ISO 8601 times).
EXTRA_STARTS_AT = "startsAt"
EXTRA_BLOCK_ENDS_AT = "capacityBlockEndsAt"


def _parse_time(value: str | None) -> datetime | None:
    return None if not value else datetime.fromisoformat(value)


def outcome(
    view: PoolView, step: Step, result: ActionResult
) -> tuple[GangNodePoolStatus, float | None, tuple[Event, ...]]:
    """The status a step's result leaves, when to look again, and what to tell users."""
    status = step.status
    action = step.action
    if action is Action.LAUNCH:
        return _launch_outcome(view, status, result)
    if not result.ok:
        # Every failing step escalates its own backoff; a config failure waits the longer
        # config delay (someone has to fix something first).
        failures = status.consecutive_failures + 1
        delay = _backoff(view, failures) if result.error_kind != "config" else view.backoff_max / 5
        err = LastError(reason=result.reason or c.EventReason.ACTION_FAILED, message=result.message)
        return (
            _with(
                status,
                consecutive_failures=failures,
                last_error=err,
                last_stack_result=f"failed: {result.reason}"
                if action in (Action.PREPARE_STACK, Action.RECORD_SET, Action.DESTROY_STACK)
                else status.last_stack_result,
            ),
            delay,
            (Event(c.EVENT_WARNING, err.reason, f"{action.value}: {err.message}"),),
        )
    status = _with(status, consecutive_failures=0)
    if action is Action.PREPARE_STACK:
        return _with(status, last_stack_operation="prepare", last_stack_result="succeeded"), 0.0, ()
    if action is Action.RECORD_SET:
        return (
            _with(
                status,
                last_stack_operation=f"record:{status.active_group}",
                last_stack_result="succeeded",
            ),
            0.0,
            (),
        )
    if action is Action.RELEASE_SET:
        return _after_release_set(view, status, step), 0.0, ()
    if action is Action.DESTROY_STACK:
        return (
            _with(
                _idle(status),
                phase=c.PHASE_RELEASING,
                last_stack_operation="destroy",
                last_stack_result="succeeded",
            ),
            0.0,
            (),
        )
    return status, step.requeue_after, ()


def settle(
    view: PoolView, step: Step, result: ActionResult
) -> tuple[GangNodePoolStatus, float | None, tuple[Event, ...]]:
    """What a stack operation that ran on the executor leaves, applied to the status as
    it is now.

    Passes went on while it ran and may have moved the status (a set became Ready beside
    its record, a node went NotReady); the result lands on that status, not on the one the
    operation started from. A record of a set that is no longer the active one is stale and
    is dropped: the next pass plans from what it sees.
    """
    if step.action is Action.RECORD_SET and step.status.active_group != view.status.active_group:
        return view.status, 0.0, ()
    return outcome(view, replace(step, status=view.status), result)


def _after_release_set(
    view: PoolView, status: GangNodePoolStatus, step: Step
) -> GangNodePoolStatus:
    if step.why == "strays":
        return _with(status, release_in_progress=None)
    # The set is gone: acquire a new generation (the generation moved when this set's
    # launch succeeded, so the next token is fresh). A pool's release (keep-warm over, a
    # warm node gone) stays Releasing for one more pass, which says it is released.
    if view.spec.claim:
        phase = c.PHASE_ACQUIRING
    elif status.phase == c.PHASE_RELEASING:
        phase = c.PHASE_RELEASING
    else:
        phase = c.PHASE_IDLE
    return _with(
        status,
        phase=phase,
        instance_ids=(),
        active_group=None,
        ready_nodes=0,
        capacity_block_ends_at=None,
        join_deadline=None,
        release_in_progress=None,
        last_stack_operation="remove-set",
    )


def _launch_outcome(
    view: PoolView, status: GangNodePoolStatus, result: ActionResult
) -> tuple[GangNodePoolStatus, float | None, tuple[Event, ...]]:
    marker = status.launch_in_progress
    assert marker is not None
    n = view.spec.count
    if result.ok:
        return (
            _with(
                status,
                phase=c.PHASE_JOINING,
                instance_ids=result.instance_ids,
                active_group=marker.group,
                ready_nodes=0,
                launch_in_progress=None,
                acquire_generation=status.acquire_generation + 1,
                consecutive_shortfalls=0,
                consecutive_failures=0,
                capacity_block_ends_at=_parse_time(result.extra.get(EXTRA_BLOCK_ENDS_AT)),
                join_deadline=view.now + view.join_deadline,
                last_error=None,
            ),
            0.0,
            (
                Event(
                    c.EVENT_NORMAL,
                    c.EventReason.LAUNCHED,
                    f"Launched {n}x {view.spec.instance_type} as group "
                    f"{marker.group}: {', '.join(result.instance_ids)}.",
                ),
            ),
        )
    kind = result.error_kind
    err = LastError(reason=result.reason or c.EventReason.LAUNCH_FAILED, message=result.message)
    if kind in ("capacity", "malformed"):
        shortfalls = status.consecutive_shortfalls + 1
        return (
            _with(
                status,
                launch_in_progress=None,
                acquire_generation=status.acquire_generation + 1,
                consecutive_shortfalls=shortfalls,
                last_shortfall_time=view.now,
                last_error=err,
            ),
            _backoff(view, shortfalls),
            (
                Event(
                    c.EVENT_WARNING,
                    c.EventReason.CAPACITY_SHORTFALL,
                    f"Attempt {shortfalls}: {err.message} "
                    "Nothing is running; the whole gang will be retried.",
                ),
            ),
        )
    if kind == "not-active":
        # The reservation has not started: nothing was asked of EC2, so the generation stays
        # and no shortfall is counted (the Workload keeps its quota and stays Pending).
        starts = _parse_time(result.extra.get(EXTRA_STARTS_AT))
        wait = view.backoff_max / 5 if starts is None else _until(view, starts)
        return (
            _with(status, launch_in_progress=None, last_error=err),
            wait,
            (Event("Normal", err.reason, err.message),),
        )
    if kind == "retryable":
        # Keep the marker: the same ClientToken is replayed, so a launch that did happen
        # is returned rather than repeated.
        failures = status.consecutive_failures + 1
        return (
            _with(status, last_error=err, consecutive_failures=failures),
            _backoff(view, failures + 1),
            (Event(c.EVENT_WARNING, err.reason, err.message),),
        )
    # Configuration: nothing was launched; the user must fix something. The generation
    # stays (no request reached a terminal result) and the marker is cleared.
    return (
        _with(status, launch_in_progress=None, last_error=err),
        view.backoff_max / 5,
        (Event(c.EVENT_WARNING, err.reason, err.message),),
    )


__all__ = [
    "EXTRA_BLOCK_ENDS_AT",
    "EXTRA_STARTS_AT",
    "STACK_ACTIONS",
    "Action",
    "ActionResult",
    "Backoff",
    "Event",
    "Instance",
    "PoolView",
    "StackPriority",
    "Step",
    "group_name",
    "outcome",
    "plan",
    "replace",
    "settle",
    "stack_priority",
]
