"""The pool's plan on the way to a set: Idle (a claim starts the acquisition; an unclaimed
pool keeps its prepared stack until `idle_stack_ttl`) and Acquiring (prepare the stack,
then launch the whole gang under a marker, or hold at $0 on a Capacity Block that cannot
take it).

Planners of the phase table (`phases.PHASES`). Idle's row reads the stack only while the
pool is unclaimed; Acquiring's reads the stack, and the launch facts while the pool is
claimed or a launch is marked (the only passes that may launch). Their views say so.
"""

from __future__ import annotations

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.durations import format_duration
from provisioner.api.gangnodepool import CapacityBlock, LastError, LaunchInProgress
from provisioner.cloud.naming import group_name
from provisioner.controllers.pool.block_window import BlockWindow
from provisioner.controllers.pool.plan_purchase import held_block_events, plan_purchase
from provisioner.controllers.pool.plan_release import release_marker
from provisioner.controllers.pool.purchase import bought_reservation
from provisioner.controllers.pool.status import changed, idle
from provisioner.controllers.pool.steps import (
    Action,
    AnyView,
    Event,
    LaunchRead,
    NotFetched,
    PoolView,
    StackRead,
    Step,
)


def plan_idle(view: PoolView[StackRead | NotFetched, NotFetched]) -> Step:
    if view.spec.claim is None:
        return _plan_idle_stack(view, view.stack)
    status = changed(
        view.status,
        phase=Phase.ACQUIRING,
        consecutive_shortfalls=0,
        consecutive_unknown_errors=0,
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


def _plan_idle_stack(view: AnyView, stack: StackRead | NotFetched) -> Step:
    """An unclaimed pool keeps its prepared stack (launch template, placement group; they
    cost nothing) so the next claim launches without a `pulumi up`, until it has been idle
    for `idle_stack_ttl`; then the stack is destroyed. A stack a failed prepare left
    unprepared (`partial`) goes the same way once nothing prepares it again. (Its row reads
    the stack whenever the pool is unclaimed; a stack not read is no stack to keep.)"""
    status = view.status
    if isinstance(stack, NotFetched):
        return Step(Action.NONE, status)
    if not stack.prepared:
        ahead = _prepare_ahead(view)
        if ahead.action is not Action.NONE or not stack.partial:
            return ahead
        # What a failed prepare left (no outputs, its resources kept) goes at the same TTL,
        # counted from that prepare: nothing retries it now.
    return _destroy_when_idle(view)


def _destroy_when_idle(view: AnyView) -> Step:
    status = view.status
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
            release_in_progress=release_marker(view, c.EventReason.STACK_IDLE, ()),
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


def _prepare_ahead(view: AnyView) -> Step:
    """An unprepared, unclaimed pool that a Workload waits for (`spec.queued`, the request
    younger than `idle_stack_ttl`) prepares its stack now, so the claim that comes with
    Kueue's quota launches at once. The idle time starts with the prepare: a Workload that
    never claims costs the one destroy at `idle_stack_ttl`, and an older request prepares
    nothing again (a TTL of 0 keeps no idle stack, so prepares nothing ahead)."""
    queued, status = view.spec.queued, view.status
    if queued is None or view.now - queued.queued_at >= view.timings.idle_stack_ttl:
        return Step(Action.NONE, status)
    return Step(
        Action.PREPARE_STACK,
        changed(status, idle_since=view.now),
        events=(
            Event(
                c.EVENT_NORMAL,
                c.EventReason.PREPARING_AHEAD,
                f"Preparing the stack of pool {view.name} for Workload "
                f"{queued.namespace}/{queued.name}, waiting for quota: its claim will "
                "launch without a prepare.",
            ),
        ),
        why="prepare ahead of quota",
    )


def plan_acquiring(view: PoolView[StackRead, LaunchRead | NotFetched]) -> Step:
    status, spec = view.status, view.spec
    marker = status.launch_in_progress
    if spec.claim is None and marker is None:
        return Step(
            Action.NONE,
            idle(changed(status, consecutive_shortfalls=0, consecutive_unknown_errors=0)),
            events=held_block_events(view),
            why="claim gone",
        )
    buying = plan_purchase(view) if marker is None else None
    if buying is not None:
        return buying
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
    if not view.stack.prepared:
        return Step(Action.PREPARE_STACK, status, why="stack not prepared")
    tokens = view.launch.tokens if isinstance(view.launch, LaunchRead) else ()
    if not tokens:
        # The launch facts could not be read: the launch sends nothing and reports that
        # failure, so there is no token to mark (a marked launch stays marked).
        return Step(Action.LAUNCH, status, why="launch (its facts unread)")
    if marker is None:
        marker = LaunchInProgress(
            client_token=tokens[0],
            client_tokens=tokens,
            mode=spec.mode,
            group=group_name(status.acquire_generation),
            started_at=view.now,
        )
    elif marker.client_tokens != tokens:
        # A marked launch resumes under the same generation and is adopted by it, not by
        # its token; the marker says what this pass sends (the same tokens unless the
        # subnet plan changed; a marker of an older controller holds `<uid>/<generation>`).
        marker = marker.model_copy(update={"client_token": tokens[0], "client_tokens": tokens})
    return Step(Action.LAUNCH, changed(status, launch_in_progress=marker), why="launch")


def _known_block(view: PoolView[object, LaunchRead | NotFetched]) -> CapacityBlock | None:
    """The Capacity Block the spec names, as EC2 reported it this pass or, unread this
    pass, as the status last recorded it."""
    wanted = bought_reservation(view.spec, view.status)
    read = view.launch.capacity_block if isinstance(view.launch, LaunchRead) else None
    if read is not None and read.reservation_id == wanted:
        return read
    recorded = view.status.capacity_block
    return recorded if recorded is not None and recorded.reservation_id == wanted else None


def _window(view: AnyView, block: CapacityBlock) -> BlockWindow:
    timings = view.timings
    return BlockWindow(block, timings.block_release_margin, timings.join_deadline)


def _block_too_late(view: AnyView, block: CapacityBlock) -> Step:
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
