"""The pool's plan while it holds a set: Joining and Satisfied (the set joins, becomes
Ready, is recorded in the stack beside the join, and is released whole if it loses a
member, misses the join deadline or reaches its Capacity Block's release) and KeepWarm
(a new claim reuses the warm set, no launch; the window goes onto the instances' tag at
the pool's turn at the account's CreateTags budget; expiry releases it).

Planners of the phase table (`phases.PHASES`): their rows read neither the stack nor the
launch facts (a pool that holds a set does not wait on the Pulumi backend), so they take a
`PoolView[NotFetched, NotFetched]`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.durations import format_duration
from provisioner.api.gangnodepool import GangNodePoolStatus, LastError
from provisioner.api.meta import to_utc_seconds
from provisioner.controllers.pool.plan_release import release_for_retry, resume_release
from provisioner.controllers.pool.status import changed, seconds_until
from provisioner.controllers.pool.steps import (
    Action,
    AnyView,
    Event,
    NotFetched,
    PoolView,
    Step,
)
from provisioner.controllers.pool.usable import deadline_message


def plan_active(view: PoolView[NotFetched, NotFetched]) -> Step:
    status, spec, n = view.status, view.spec, view.spec.count
    releasing = status.release_in_progress
    if releasing is not None and set(releasing.instance_ids) & set(status.instance_ids):
        # The set is going (broken, past its deadline, at its block's end): nodes that turn
        # Ready while it goes must not make it Satisfied, and a claim must not be told so.
        return resume_release(view)
    missing = [iid for iid in status.instance_ids if iid in view.gone_ids]
    if missing or len(status.instance_ids) != n:
        return release_for_retry(
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
        # A record that waits in the executor's queue leaves the pool's passes to this
        # step's wait: the block's release.
        requeue = seconds_until(view.now, release_at)
        if not recorded:
            return Step(Action.RECORD_SET, status, requeue_after=requeue, why="record set in stack")
        return Step(Action.NONE, status, requeue_after=requeue)
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
    wait = min((deadline - view.now).total_seconds(), 5.0)
    if not recorded:
        # While the nodes join: the record runs beside the join (or waits its turn, the
        # pool looked at again meanwhile as without it: `wait`).
        return Step(Action.RECORD_SET, status, requeue_after=wait, why="record set in stack")
    return Step(Action.NONE, status, requeue_after=wait)


def _block_release_at(view: AnyView) -> datetime | None:
    ends = view.status.capacity_block_ends_at
    return None if ends is None else ends - view.timings.block_release_margin


def _block_ending_message(view: AnyView) -> str:
    ends = view.status.capacity_block_ends_at
    assert ends is not None
    return (
        f"Planned release: Capacity Block {view.spec.capacity_reservation_id} (group "
        f"{view.status.active_group}) ends at {ends:%Y-%m-%dT%H:%M:%SZ} and EC2 reclaims its "
        f"instances then; releasing the {view.spec.count} nodes "
        f"{format_duration(view.timings.block_release_margin)} before its end, as planned. "
        "Buy or extend a block to run longer."
    )


def _release_for_block_end(view: AnyView) -> Step:
    message = _block_ending_message(view)
    step = release_for_retry(view, c.EventReason.CAPACITY_BLOCK_ENDING, message)
    err = LastError(reason=c.EventReason.CAPACITY_BLOCK_ENDING, message=message)
    # Planned, not a failure: a Normal event.
    planned = Event(c.EVENT_NORMAL, err.reason, message)
    return replace(step, status=changed(step.status, last_error=err), events=(planned,))


def _enter_keep_warm(view: AnyView, status: GangNodePoolStatus) -> Step:
    ttl = view.spec.keep_warm_ttl
    if ttl <= timedelta(0):
        return Step(Action.NONE, changed(status, phase=Phase.RELEASING), requeue_after=0.0)
    until = view.now + ttl
    n = view.spec.count
    joining = f" ({status.ready_nodes}/{n} Ready so far)" if status.ready_nodes < n else ""
    # The window goes onto the instances' tag on a later pass, when the account's budget
    # gives the pool a turn at CreateTags (`plan_keep_warm`): a wave of gangs ending at once
    # would otherwise spend the mutating bucket at once and be throttled, and a set claimed
    # again before its turn never needs the tag (the reaper reads the pool's own window).
    # The next pass, which the status write brings, plans the tag and the window's end.
    return Step(
        Action.NONE,
        changed(status, phase=Phase.KEEP_WARM, keep_warm_until=until, join_deadline=None),
        requeue_after=0.0,
        events=(
            Event(
                c.EVENT_NORMAL,
                c.EventReason.KEEP_WARM,
                f"Claim dropped; keeping {n} nodes{joining} warm until {until:%Y-%m-%dT%H:%M:%SZ}.",
            ),
        ),
    )


def _release_at_join_deadline(view: AnyView, ready: int) -> Step:
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
    step = release_for_retry(view, c.EventReason.JOIN_DEADLINE_EXCEEDED, message)
    if not unusable:
        return step
    err = LastError(reason=c.EventReason.JOIN_DEADLINE_EXCEEDED, message=message)
    return replace(step, status=changed(step.status, last_error=err))


def plan_keep_warm(view: PoolView[NotFetched, NotFetched]) -> Step:
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
        error = status.last_error
        if error is not None and error.operation == Action.TAG_KEEP_WARM.value:
            # The window's copy on EC2 no longer matters: a claimed set never goes for it.
            back = changed(back, last_error=None, consecutive_failures=0)
        # The keep-warm tag is left as it is, not cleared: the reaper never takes a claimed
        # set for its tag (`reaper._keep_warm_over`), and a clear per warm claim was one
        # mutating EC2 call per admission, throttled in a wave. No event of its own: the
        # claim's ("Claimed by ...; reusing its warm nodes") says it.
        return Step(Action.NONE, back, requeue_after=None if whole else 0.0)
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
    if keep_warm_tag_owed(view):
        # Copying keepWarmUntil onto the instances' tag is the only step a warm pool runs:
        # the reaper enforces the window from it after a restart. It runs at the pool's
        # turn at the account's CreateTags budget, and again after a failure.
        return Step(Action.TAG_KEEP_WARM, status, requeue_after=requeue, why="keep-warm tag")
    return Step(Action.NONE, status, requeue_after=requeue)


def keep_warm_tag_owed(view: AnyView) -> bool:
    """Whether a member of the warm set lacks the window on its tag: neither this
    reconciler wrote it nor the listing shows it (an unlisted member counts as lacking).
    Compared to the second, as the status and the tag both keep it."""
    if view.status.keep_warm_until is None:
        return False
    until = to_utc_seconds(view.status.keep_warm_until)
    if _holds(view.keep_warm_tagged, until):
        return False
    tagged = {i.instance_id: i.keep_warm_until for i in view.live}
    return not all(_holds(tagged.get(iid), until) for iid in view.status.instance_ids)


def _holds(tag: datetime | None, until: datetime) -> bool:
    return tag is not None and to_utc_seconds(tag) == until
