"""The pool's plan in Releasing, and for a pool being deleted: the set goes, and the stack
with it when it is not kept; and the release marker and the release-for-retry every phase
that drops a set shares.

Planners of the phase table (`phases.PHASES`): their rows read the stack, never the
launch facts, so they take a `PoolView[StackRead, NotFetched]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import ReleaseInProgress
from provisioner.controllers.pool.status import changed, idle
from provisioner.controllers.pool.steps import (
    Action,
    AnyView,
    Event,
    NotFetched,
    PoolView,
    ReleasePurpose,
    StackRead,
    Step,
)


def _held_ids(view: AnyView) -> tuple[str, ...]:
    """What a release must terminate: the status's set and whatever of the pool still runs."""
    return tuple(dict.fromkeys([*view.status.instance_ids, *(i.instance_id for i in view.live)]))


def release_marker(view: AnyView, reason: str, ids: Sequence[str]) -> ReleaseInProgress:
    """The release marker. A release already in progress keeps its start: it bounds how
    long the ids have been known, which is what lets NotFound by id count as gone (EC2
    forgets an instance about an hour after it terminated; see `cloud/release.py`)."""
    held = view.status.release_in_progress
    started = view.now if held is None else min(held.started_at, view.now)
    return ReleaseInProgress(started_at=started, reason=reason, instance_ids=tuple(ids))


def release_for_retry(view: AnyView, reason: str, message: str) -> Step:
    status = view.status
    ids = _held_ids(view)
    return Step(
        Action.RELEASE_SET,
        changed(status, release_in_progress=release_marker(view, reason, ids)),
        release_ids=ids,
        release_purpose=ReleasePurpose.ACTIVE_SET,
        events=(Event(c.EVENT_WARNING, reason, message),),
        why=reason,
    )


def resume_release(view: AnyView) -> Step:
    """Go on releasing the set the marker names: it was written before the first terminate,
    and a set being released is never Ready or warm again, whatever its nodes show while
    they go (they turn Ready late, or a pass sees them before the release has ended)."""
    held = view.status.release_in_progress
    assert held is not None
    return Step(
        Action.RELEASE_SET,
        view.status,
        release_ids=_held_ids(view),
        release_purpose=ReleasePurpose.ACTIVE_SET,
        why=f"release in progress ({held.reason})",
    )


def plan_releasing(view: PoolView[StackRead, NotFetched]) -> Step:
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
                or release_marker(view, c.EventReason.RELEASED, ids),
            ),
            release_ids=ids,
            release_purpose=ReleasePurpose.ACTIVE_SET,
            why="release set",
        )
    if not keep_stack and (view.live or status.instance_ids or view.stack.prepared):
        return Step(
            Action.DESTROY_STACK,
            changed(
                status,
                release_in_progress=status.release_in_progress
                or release_marker(view, c.EventReason.RELEASED, status.instance_ids),
            ),
            why="destroy stack",
        )
    idle_ttl = view.timings.idle_stack_ttl.total_seconds()
    return Step(
        Action.NONE,
        changed(idle(status), idle_since=view.now if view.stack.prepared else None),
        requeue_after=0.0 if view.spec.claim else (idle_ttl if view.stack.prepared else None),
        events=(
            Event(
                c.EVENT_NORMAL, c.EventReason.RELEASED, f"Pool {view.name} released; 0 instances."
            ),
        ),
    )


def plan_delete(view: PoolView[StackRead, NotFetched]) -> Step:
    status = view.status
    pending = status.release_in_progress is not None and status.release_in_progress.instance_ids
    stack = view.stack.prepared or view.stack.partial
    if view.live or status.instance_ids or stack or pending:
        return Step(
            Action.DESTROY_STACK,
            changed(
                status,
                phase=Phase.RELEASING,
                release_in_progress=status.release_in_progress
                or release_marker(view, c.EventReason.POOL_DELETED, status.instance_ids),
            ),
            why="pool deleted",
        )
    if view.has_finalizer:
        # The object goes with its finalizer: its status is written no more (an Idle phase
        # nobody reads, whose watch event would start one more pass and EC2 listing).
        return Step(Action.REMOVE_FINALIZER, status, why="released; finalizer off")
    return Step(Action.NONE, status)
