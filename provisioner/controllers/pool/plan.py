"""The GangNodePool life cycle's next step: `plan(view)`, a pure function.

`plan` looks at one pool as a pass observed it (`PoolView`: spec, status, what EC2 and the
Nodes show for it, the time, and the stack's answer where it needs one) and names ONE step:
an action with an external effect (prepare the stack, launch, record the set in the stack,
release a set, destroy the stack, mirror keep-warm to EC2) or a plain status change. What
that step's result leaves is `pool_outcomes`'. The reconciler persists the step's status
before acting, so every external effect is bracketed: a marker persisted before it (for a
launch: the ClientToken and group), the result persisted right after. A crash anywhere
leaves either the marker, which the next pass resumes with the same token, or the result.

Stack steps (`STACK_ACTIONS`) run on the stack executor, apart from the pass that plans
them. While one runs (`PoolView.stack_operation`), `plan` lets only plain status changes
through.

Phases: Idle → Acquiring → Joining → Satisfied → KeepWarm → Releasing → Idle, and
KeepWarm → Satisfied on a new claim (the warm set is reused, no launch). N-or-0 holds
throughout: a set that loses any instance, or misses the join deadline, is released whole
before the next generation is acquired.

Reserved capacity adds three timed transitions. A Capacity Block that has not started holds
the pool in Acquiring at $0 (no launch, no shortfall counted, the generation stays) until
its start, with a message giving it. A set on a block is released
`PoolTimings.block_release_margin` before the block's end — EC2 reclaims the instances
then — with a message saying this release was planned. And no gang is launched on a block
too close to that release for its nodes to join (`block_window`): the pool records the
block's end in its status and launches nothing, and the Workload decision rejects the
claimant from that record.

A claim that drops while the set is still joining puts the set in keep-warm (or releases
it, with no keep-warm) at once: nobody waits for those nodes any more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.durations import format_duration
from provisioner.api.gangnodepool import (
    CapacityBlock,
    GangNodePoolSpec,
    GangNodePoolStatus,
    LastError,
    LaunchInProgress,
    ReleaseInProgress,
)
from provisioner.cloud.naming import group_name
from provisioner.controllers.pool.block_window import BlockWindow
from provisioner.controllers.pool.status import changed, idle, seconds_until
from provisioner.controllers.pool.steps import (
    Action,
    Event,
    PoolView,
    ReleasePurpose,
    Step,
)
from provisioner.controllers.pool.usable import deadline_message

# The phases whose plan reads whether the stack is prepared (see `needs_stack`).
_STACK_PHASES = frozenset({Phase.ACQUIRING, Phase.RELEASING})


def needs_stack(spec: GangNodePoolSpec, status: GangNodePoolStatus, *, deleting: bool) -> bool:
    """Whether `plan` may read `PoolView.stack_prepared` for a pool in this state.

    A pass gathers the stack's answer only then: a pool that is joining, settled or warm
    does not wait on the Pulumi backend. An Idle pool asks only while unclaimed (its idle
    stack TTL); a claimed one moves to Acquiring first.
    """
    if deleting or status.phase in _STACK_PHASES:
        return True
    return status.phase == Phase.IDLE and spec.claim is None


def _held_ids(view: PoolView) -> tuple[str, ...]:
    """What a release must terminate: the status's set and whatever of the pool still runs."""
    return tuple(dict.fromkeys([*view.status.instance_ids, *(i.instance_id for i in view.live)]))


def _strays(view: PoolView) -> tuple[str, ...]:
    """Live instances of this pool that neither the active set nor an in-flight launch owns,
    and the ids a release (or a launch's rollback) has not yet seen go, which the set does
    not own either: EC2's listing may not show those, so they are released by id."""
    owned = set(view.status.instance_ids)
    marker = view.status.launch_in_progress
    listed = [
        i.instance_id
        for i in view.live
        if i.instance_id not in owned and (marker is None or i.group != marker.group)
    ]
    held = view.status.release_in_progress
    pending = [i for i in (held.instance_ids if held else ()) if i not in owned]
    return tuple(dict.fromkeys([*listed, *pending]))


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
    status = changed(
        view.status,
        ready_nodes=step.status.ready_nodes,
        unusable_nodes=step.status.unusable_nodes,
    )
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
    releasing = view.deleting or view.status.phase == Phase.RELEASING
    if step.action is Action.NONE and not releasing:
        return step
    # Only the Ready count, which this pass observed, is kept of a step that waits.
    status = changed(
        view.status,
        ready_nodes=step.status.ready_nodes,
        unusable_nodes=step.status.unusable_nodes,
    )
    return Step(Action.NONE, status, why=f"waiting for the stack's {running.value}")


def _plan(view: PoolView) -> Step:
    status = view.status
    if view.deleting:
        return _plan_delete(view)
    strays = _strays(view)
    if strays:
        reason, event = _stray_release(view, strays)
        return Step(
            Action.RELEASE_SET,
            changed(status, release_in_progress=_releasing(view, reason, strays)),
            release_ids=strays,
            events=(event,),
            release_purpose=ReleasePurpose.STRAYS,
            why="strays",
        )
    phase = status.phase
    if phase == Phase.IDLE:
        return _plan_idle(view)
    if phase == Phase.ACQUIRING:
        return _plan_acquiring(view)
    if phase in (Phase.JOINING, Phase.SATISFIED):
        return _plan_active(view)
    if phase == Phase.KEEP_WARM:
        return _plan_keep_warm(view)
    return _plan_releasing(view)


def _stray_release(view: PoolView, strays: tuple[str, ...]) -> tuple[str, Event]:
    """Why the strays are released, and what the pool says about it. When they are all ids
    a launch's rollback left (see `pool_outcomes._keep_unreleased`), the rollback's reason
    stays: a Normal event when EC2 showed each going (only their ENIs are left to delete), a
    Warning when it did not. Anything else that no set owns is a Warning about strays."""
    held = view.status.release_in_progress
    listed = ", ".join(strays)
    if held is not None and set(strays) <= set(held.instance_ids):
        if held.reason == c.EventReason.ROLLED_BACK:
            return held.reason, Event(
                c.EVENT_NORMAL,
                held.reason,
                f"Cleaning up after the rollback of a launch of pool {view.name}: confirming "
                f"its {len(strays)} instances gone and deleting the ENIs they leave: {listed}.",
            )
        if held.reason == c.EventReason.ROLLBACK_UNCONFIRMED:
            return held.reason, Event(
                c.EVENT_WARNING,
                held.reason,
                f"Terminating again {len(strays)} instances of pool {view.name} that the "
                f"rollback of a launch did not see go, and deleting the ENIs they leave: "
                f"{listed}.",
            )
    return c.EventReason.STRAY_INSTANCES, Event(
        c.EVENT_WARNING,
        c.EventReason.STRAY_INSTANCES,
        f"Releasing {len(strays)} instances of pool {view.name} that no set owns "
        f"(terminating what still runs, deleting the ENIs they leave): {listed}.",
    )


def _releasing(view: PoolView, reason: str, ids: Sequence[str]) -> ReleaseInProgress:
    """The release marker. A release already in progress keeps its start: it bounds how
    long the ids have been known, which is what lets NotFound by id count as gone (EC2
    forgets an instance about an hour after it terminated; see `cloud/release.py`)."""
    held = view.status.release_in_progress
    started = view.now if held is None else min(held.started_at, view.now)
    return ReleaseInProgress(started_at=started, reason=reason, instance_ids=tuple(ids))


def _plan_delete(view: PoolView) -> Step:
    status = view.status
    pending = status.release_in_progress is not None and status.release_in_progress.instance_ids
    if view.live or status.instance_ids or view.prepared or pending:
        return Step(
            Action.DESTROY_STACK,
            changed(
                status,
                phase=Phase.RELEASING,
                release_in_progress=status.release_in_progress
                or _releasing(view, c.EventReason.POOL_DELETED, status.instance_ids),
            ),
            why="pool deleted",
        )
    if view.has_finalizer:
        return Step(Action.REMOVE_FINALIZER, idle(status), why="released; finalizer off")
    return Step(Action.NONE, status)


def _plan_idle(view: PoolView) -> Step:
    if view.spec.claim is None:
        return _plan_idle_stack(view)
    status = changed(
        view.status,
        phase=Phase.ACQUIRING,
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
    if not view.prepared:
        return Step(Action.NONE, status)
    since = status.idle_since
    if since is None:
        # Idle by a path that did not stamp it (a claim dropped mid-acquisition, a status
        # from before the stamp existed): the idle time starts now.
        return Step(
            Action.NONE,
            changed(status, idle_since=view.now),
            requeue_after=view.timings.idle_stack_ttl.total_seconds(),
        )
    remaining = (since + view.timings.idle_stack_ttl - view.now).total_seconds()
    if remaining > 0:
        return Step(Action.NONE, status, requeue_after=remaining)
    return Step(
        Action.DESTROY_STACK,
        changed(
            status,
            phase=Phase.RELEASING,
            idle_since=None,
            release_in_progress=_releasing(view, c.EventReason.STACK_IDLE, ()),
        ),
        events=(
            Event(
                c.EVENT_NORMAL,
                c.EventReason.STACK_IDLE,
                f"Pool {view.name} idle since {since:%Y-%m-%dT%H:%M:%SZ}, past "
                f"stackOperations.idleStackTTL ({format_duration(view.timings.idle_stack_ttl)}); "
                "destroying its stack.",
            ),
        ),
        why="stack idle",
    )


def _plan_acquiring(view: PoolView) -> Step:
    status, spec = view.status, view.spec
    marker = status.launch_in_progress
    if spec.claim is None and marker is None:
        return Step(Action.NONE, idle(changed(status, consecutive_shortfalls=0)), why="claim gone")
    if marker is None:
        # A marked launch is resumed whatever the block (it may have reached EC2: the same
        # token adopts its set); a new one is not made on a block that cannot take it.
        block = _known_block(view)
        if block is not None:
            if view.now >= _window(view, block).last_start:
                return _block_too_late(view, block)
            status = changed(status, capacity_block=block)
    if marker is None and status.stack_drift:
        # The last launch met a resource of the stack gone from EC2: the prepare refreshes
        # the stack, which forgets it, and makes it again. The launch comes after.
        return Step(Action.PREPARE_STACK, status, refresh_stack=True, why="stack drifted")
    if not view.prepared:
        return Step(Action.PREPARE_STACK, status, why="stack not prepared")
    if marker is None:
        group = group_name(status.acquire_generation)
        marker = LaunchInProgress(
            client_token=f"{view.uid}/{status.acquire_generation}"[:64],
            mode=spec.mode,
            group=group,
            started_at=view.now,
        )
    return Step(Action.LAUNCH, changed(status, launch_in_progress=marker), why="launch")


def _known_block(view: PoolView) -> CapacityBlock | None:
    """The Capacity Block the spec names, as EC2 reported it this pass or, unread this
    pass, as the status last recorded it."""
    wanted = view.spec.capacity_reservation_id
    if view.capacity_block is not None and view.capacity_block.reservation_id == wanted:
        return view.capacity_block
    recorded = view.status.capacity_block
    return recorded if recorded is not None and recorded.reservation_id == wanted else None


def _window(view: PoolView, block: CapacityBlock) -> BlockWindow:
    timings = view.timings
    return BlockWindow(block, timings.block_release_margin, timings.join_deadline)


def _block_too_late(view: PoolView, block: CapacityBlock) -> Step:
    """No launch: the block's end is recorded and said once; the Workload decision rejects
    the claimant from the record, and the claim's drop brings the pool back to Idle. It is
    read again after the config delay, in case the block was extended meanwhile."""
    message = _window(view, block).refusal(view.now, view.spec.count)
    err = LastError(reason=c.EventReason.CAPACITY_BLOCK_ENDED, message=message)
    said = view.status.last_error == err
    return Step(
        Action.NONE,
        changed(view.status, capacity_block=block, last_error=err),
        requeue_after=view.timings.config_delay,
        events=() if said else (Event(c.EVENT_WARNING, err.reason, message),),
        why="capacity block too late",
    )


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
    recorded = status.active_group is not None and status.recorded_group == status.active_group
    ready = len(view.usable_ids() & set(status.instance_ids))
    status = changed(status, ready_nodes=ready, unusable_nodes=view.unusable_nodes())
    if spec.claim is None:
        # Nobody waits for this set any more, joined or not: keep it warm (or release it)
        # now, rather than bill it until its nodes are Ready.
        return _enter_keep_warm(view, status)
    if ready == n:
        if status.phase != Phase.SATISFIED:
            return Step(
                Action.NONE,
                changed(status, phase=Phase.SATISFIED, join_deadline=None, last_error=None),
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
        return Step(Action.NONE, status, requeue_after=seconds_until(view.now, release_at))
    deadline = status.join_deadline or (view.now + view.timings.join_deadline)
    if status.phase == Phase.SATISFIED:
        # A node went away or NotReady: back to Joining, with a fresh deadline.
        return Step(
            Action.NONE,
            changed(
                status, phase=Phase.JOINING, join_deadline=view.now + view.timings.join_deadline
            ),
            requeue_after=5.0,
            events=(
                Event(c.EVENT_WARNING, c.EventReason.NODE_NOT_READY, f"{ready}/{n} nodes Ready."),
            ),
        )
    if view.now >= deadline:
        return _release_at_join_deadline(view, ready)
    status = changed(status, join_deadline=deadline)
    if not recorded:
        # While the nodes join: the record runs beside the join.
        return Step(Action.RECORD_SET, status, why="record set in stack")
    wait = (deadline - view.now).total_seconds()
    return Step(Action.NONE, status, requeue_after=min(wait, 5.0))


def _release_at_join_deadline(view: PoolView, ready: int) -> Step:
    """The set did not become whole in time. When Ready nodes were not usable, what they
    lacked (and the DaemonSet that provides it) is the release's message and the pool's
    last error, which the Workload's check repeats while the next set is acquired."""
    unusable = view.unusable_nodes() or ()
    message = deadline_message(
        view.name,
        ready,
        view.spec.count,
        format_duration(view.timings.join_deadline),
        unusable,
    )
    step = _release_for_retry(view, c.EventReason.JOIN_DEADLINE_EXCEEDED, message)
    if not unusable:
        return step
    err = LastError(reason=c.EventReason.JOIN_DEADLINE_EXCEEDED, message=message)
    return replace(step, status=changed(step.status, last_error=err))


def _block_release_at(view: PoolView) -> datetime | None:
    ends = view.status.capacity_block_ends_at
    return None if ends is None else ends - view.timings.block_release_margin


def _until(view: PoolView, moment: datetime | None) -> float | None:
    return None if moment is None else max((moment - view.now).total_seconds(), 0.0)


def _block_ending_message(view: PoolView) -> str:
    ends = view.status.capacity_block_ends_at
    assert ends is not None
    return (
        f"Planned release: Capacity Block {view.spec.capacity_reservation_id} (group "
        f"{view.status.active_group}) ends at {ends:%Y-%m-%dT%H:%M:%SZ} and EC2 reclaims its "
        f"instances then; releasing the {view.spec.count} nodes "
        f"{format_duration(view.timings.block_release_margin)} before its end, as planned. "
        "Buy or extend a block to run longer."
    )


def _release_for_block_end(view: PoolView) -> Step:
    message = _block_ending_message(view)
    step = _release_for_retry(view, c.EventReason.CAPACITY_BLOCK_ENDING, message)
    err = LastError(reason=c.EventReason.CAPACITY_BLOCK_ENDING, message=message)
    # Planned, not a failure: a Normal event.
    planned = Event(c.EVENT_NORMAL, err.reason, message)
    return replace(step, status=changed(step.status, last_error=err), events=(planned,))


def _enter_keep_warm(view: PoolView, status: GangNodePoolStatus) -> Step:
    ttl = view.spec.keep_warm_ttl
    if ttl <= timedelta(0):
        return Step(Action.NONE, changed(status, phase=Phase.RELEASING), requeue_after=0.0)
    until = view.now + ttl
    block_wait = seconds_until(view.now, _block_release_at(view))
    wait = ttl.total_seconds() if block_wait is None else min(ttl.total_seconds(), block_wait)
    n = view.spec.count
    joining = f" ({status.ready_nodes}/{n} Ready so far)" if status.ready_nodes < n else ""
    return Step(
        Action.TAG_KEEP_WARM,
        changed(status, phase=Phase.KEEP_WARM, keep_warm_until=until, join_deadline=None),
        requeue_after=wait,
        events=(
            Event(
                c.EVENT_NORMAL,
                c.EventReason.KEEP_WARM,
                f"Claim dropped; keeping {n} nodes{joining} warm until {until:%Y-%m-%dT%H:%M:%SZ}.",
            ),
        ),
    )


def _plan_keep_warm(view: PoolView) -> Step:
    status = view.status
    if view.spec.claim is not None:
        # A new claimant reuses the warm set: no launch. A whole set of Ready nodes is
        # Satisfied in this one step (its record stands: the set is the one recorded); one
        # that lost readiness while warm goes back to Joining, under a fresh deadline.
        ready = len(view.usable_ids() & set(status.instance_ids))
        whole = ready == view.spec.count == len(status.instance_ids) and not view.gone_ids & set(
            status.instance_ids
        )
        back = changed(
            status,
            phase=Phase.SATISFIED if whole else Phase.JOINING,
            keep_warm_until=None,
            ready_nodes=ready,
            unusable_nodes=view.unusable_nodes(),
            join_deadline=None if whole else view.now + view.timings.join_deadline,
        )
        # No event of its own: the claim's ("Claimed by ...; reusing its warm nodes") says it,
        # and every warm claim of a wave would write a second Event saying the same.
        return Step(Action.TAG_KEEP_WARM, back, requeue_after=None if whole else 0.0)
    if any(iid in view.gone_ids for iid in status.instance_ids):
        return Step(Action.NONE, changed(status, phase=Phase.RELEASING), requeue_after=0.0)
    release_at = _block_release_at(view)
    if release_at is not None and view.now >= release_at:
        return Step(
            Action.NONE,
            changed(status, phase=Phase.RELEASING),
            requeue_after=0.0,
            events=(
                Event(
                    c.EVENT_NORMAL, c.EventReason.CAPACITY_BLOCK_ENDING, _block_ending_message(view)
                ),
            ),
        )
    until = status.keep_warm_until
    if until is None or view.now >= until:
        return Step(
            Action.NONE,
            changed(status, phase=Phase.RELEASING),
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
    block_wait = seconds_until(view.now, release_at)
    requeue = wait if block_wait is None else min(wait, block_wait)
    if status.consecutive_failures:
        # Copying keepWarmUntil onto the instances' tag is the only step a warm pool runs,
        # and it failed (the phase and the window were saved with it): try it again, or the
        # reaper's EC2-side backstop for this set never learns the window.
        return Step(Action.TAG_KEEP_WARM, status, requeue_after=requeue, why="keep-warm tag")
    return Step(Action.NONE, status, requeue_after=requeue)


def _plan_releasing(view: PoolView) -> Step:
    """The set is released and the prepared stack kept for the next claim (the idle TTL
    destroys it later); with `idle_stack_ttl` 0, the stack goes with the set."""
    status = view.status
    keep_stack = view.timings.idle_stack_ttl > timedelta(0)
    if keep_stack and (view.live or status.instance_ids):
        ids = _held_ids(view)
        return Step(
            Action.RELEASE_SET,
            changed(
                status,
                release_in_progress=status.release_in_progress
                or _releasing(view, c.EventReason.RELEASED, ids),
            ),
            release_ids=ids,
            release_purpose=ReleasePurpose.ACTIVE_SET,
            why="release set",
        )
    if not keep_stack and (view.live or status.instance_ids or view.prepared):
        return Step(
            Action.DESTROY_STACK,
            changed(
                status,
                release_in_progress=status.release_in_progress
                or _releasing(view, c.EventReason.RELEASED, status.instance_ids),
            ),
            why="destroy stack",
        )
    idle_ttl = view.timings.idle_stack_ttl.total_seconds()
    return Step(
        Action.NONE,
        changed(idle(status), idle_since=view.now if view.prepared else None),
        requeue_after=0.0 if view.spec.claim else (idle_ttl if view.prepared else None),
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
        changed(status, release_in_progress=_releasing(view, reason, ids)),
        release_ids=ids,
        release_purpose=ReleasePurpose.ACTIVE_SET,
        events=(Event(c.EVENT_WARNING, reason, message),),
        why=reason,
    )
