"""What a pool step's result leaves: `outcome` and `settle`, pure functions.

`outcome(view, step, result)` gives the status a step's result leaves, when to look at the
pool again, and the Events to tell users. `settle` does the same for a stack operation that
ran on the executor, applied to the status the pool has reached by the time it ended.

The wait after a failure is chosen from the failure's kind (`FailureKind`): a capacity
shortfall moves the generation and is retried at the account's launch budget's pace
(`launch_turns`), counted as an attempt on retryBackoff's schedule; a throttled launch
waits for its turn at the shrunk budget; another transient failure keeps the launch marker
(the same ClientToken is replayed) and backs off by the failure count; a configuration
failure waits `PoolTimings.config_delay`, since somebody has to fix something first.
"""

from __future__ import annotations

from dataclasses import replace

from provisioner.api import constants as c
from provisioner.api.constants import FailureKind, Phase
from provisioner.api.gangnodepool import (
    CapacityBlock,
    GangNodePoolStatus,
    LastError,
    ReleaseInProgress,
    StackOperation,
    StackResult,
)
from provisioner.controllers.pool.drift_outcome import drift_outcome
from provisioner.controllers.pool.plan_purchase import purchase_outcome
from provisioner.controllers.pool.status import changed, idle, seconds_until
from provisioner.controllers.pool.steps import (
    STACK_ACTIONS,
    Action,
    ActionResult,
    AnyView,
    Event,
    ReleasePurpose,
    Step,
)

Outcome = tuple[GangNodePoolStatus, float | None, tuple[Event, ...]]
"""The status to persist, when to look again (None: on the next event), the Events."""

# The stack steps whose failure is the stack's (a release's is the set's, and EC2's).
_STACK_RESULT_ACTIONS = STACK_ACTIONS - {Action.RELEASE_SET}
_SHORTFALLS = frozenset({FailureKind.CAPACITY, FailureKind.MALFORMED})

# The failed steps whose `lastError` a step's success clears: its own, and those it makes
# moot. A released set needs no record (nor its keep-warm tag); a destroyed stack needs no
# prepare, record or set removal. A launch that succeeds clears any error (see
# `_launch_outcome`). An error from before `lastError.operation` existed is left to those.
_CLEARS: dict[Action, frozenset[Action]] = {
    Action.PREPARE_STACK: frozenset({Action.PREPARE_STACK}),
    Action.RECORD_SET: frozenset({Action.RECORD_SET}),
    Action.RELEASE_SET: frozenset({Action.RELEASE_SET}),
    Action.DESTROY_STACK: frozenset(
        {Action.PREPARE_STACK, Action.RECORD_SET, Action.RELEASE_SET, Action.DESTROY_STACK}
    ),
    Action.TAG_KEEP_WARM: frozenset({Action.TAG_KEEP_WARM}),
}
_CLEARED_WITH_THE_SET = frozenset({Action.RELEASE_SET, Action.RECORD_SET, Action.TAG_KEEP_WARM})


def _failure(result: ActionResult, action: Action, default_reason: str) -> LastError:
    """The `lastError` of a failed step: what failed, why, and the failure's kind."""
    return LastError(
        reason=result.reason or default_reason,
        message=result.message,
        operation=action.value,
        kind=result.failure,
    )


def _cleared(
    status: GangNodePoolStatus, succeeded: Action, cleared: frozenset[Action] | None = None
) -> GangNodePoolStatus:
    """`status` without the error of a failed step that `succeeded` settles."""
    error = status.last_error
    if error is None or error.operation is None:
        return status
    settles = _CLEARS.get(succeeded, frozenset()) if cleared is None else cleared
    if error.operation not in {action.value for action in settles}:
        return status
    return changed(status, last_error=None)


def outcome(view: AnyView, step: Step, result: ActionResult) -> Outcome:
    """The status a step's result leaves, when to look again, and what to tell users."""
    status = step.status
    action = step.action
    if action is Action.LAUNCH:
        return _launch_outcome(view, status, result)
    if action is Action.PURCHASE_BLOCK:
        return purchase_outcome(view, status, result)
    if not result.ok:
        # Every failing step escalates its own backoff; a config failure waits the longer
        # config delay (someone has to fix something first).
        failures = status.consecutive_failures + 1
        delay = (
            view.timings.config_delay
            if result.failure is FailureKind.CONFIG
            else view.timings.backoff(failures)
        )
        err = _failure(result, action, c.EventReason.ACTION_FAILED)
        return (
            changed(
                status,
                consecutive_failures=failures,
                last_error=err,
                last_stack_result=StackResult.failed(result.reason)
                if action in _STACK_RESULT_ACTIONS
                else status.last_stack_result,
            ),
            delay,
            (Event(c.EVENT_WARNING, err.reason, f"{action.value}: {err.message}"),),
        )
    status = changed(status, consecutive_failures=0)
    if action is not Action.RELEASE_SET:  # a release clears by what it released, below
        status = _cleared(status, action)
    if action is Action.PREPARE_STACK:
        return _after_prepare(status, step, result)
    if action is Action.RECORD_SET:
        return (
            changed(
                status,
                last_stack_operation=StackOperation.RECORD,
                recorded_group=status.active_group,
                last_stack_result=StackResult.succeeded(),
            ),
            0.0,
            (),
        )
    if action is Action.RELEASE_SET:
        return _after_release_set(view, status, step), 0.0, ()
    if action is Action.DESTROY_STACK:
        return (
            changed(
                idle(status),
                phase=Phase.RELEASING,
                last_stack_operation=StackOperation.DESTROY,
                recorded_group=None,
                last_stack_result=StackResult.succeeded(),
            ),
            0.0,
            (),
        )
    return status, step.requeue_after, ()


def _after_prepare(status: GangNodePoolStatus, step: Step, result: ActionResult) -> Outcome:
    """A prepare that made again what was deleted outside the stack says so, once."""
    repaired = step.refresh_stack or bool(result.repairs)
    events: tuple[Event, ...] = ()
    if result.repairs:
        said = "; ".join(result.repairs)
        events = (
            Event(c.EVENT_NORMAL, c.EventReason.STACK_REPAIRED, f"{said[0].upper()}{said[1:]}."),
        )
    elif step.refresh_stack:
        events = (
            Event(
                c.EVENT_NORMAL,
                c.EventReason.STACK_REPAIRED,
                "The stack was refreshed and every resource of it still exists in EC2; "
                "launching from it again.",
            ),
        )
    return (
        changed(
            status,
            last_stack_operation=StackOperation.REPAIR if repaired else StackOperation.PREPARE,
            recorded_group=None,
            last_stack_result=StackResult.succeeded(),
            stack_drift=None,
        ),
        0.0,
        events,
    )


def settle(view: AnyView, step: Step, result: ActionResult) -> Outcome:
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


def _after_release_set(view: AnyView, status: GangNodePoolStatus, step: Step) -> GangNodePoolStatus:
    if step.release_purpose is ReleasePurpose.STRAYS:
        return changed(_cleared(status, Action.RELEASE_SET), release_in_progress=None)
    # The set is gone, and with it what its record and its keep-warm tag were for.
    status = _cleared(status, Action.RELEASE_SET, _CLEARED_WITH_THE_SET)
    # The set is gone: acquire a new generation (the generation moved when this set's
    # launch succeeded, so the next token is fresh). A pool's release (keep-warm over, a
    # warm node gone) stays Releasing for one more pass, which says it is released.
    if view.spec.claim:
        phase = Phase.ACQUIRING
    elif status.phase == Phase.RELEASING:
        phase = Phase.RELEASING
    else:
        phase = Phase.IDLE
    return changed(
        status,
        phase=phase,
        instance_ids=(),
        active_group=None,
        ready_nodes=0,
        unusable_nodes=None,
        capacity_block_ends_at=None,
        join_deadline=None,
        release_in_progress=None,
        last_stack_operation=StackOperation.REMOVE_SET,
        recorded_group=None,
        # The stack no longer holds the set: whatever its last operation's failure was
        # (a record during an outage), the removal that followed it succeeded.
        last_stack_result=StackResult.succeeded(),
    )


def _block_of(view: AnyView, result: ActionResult) -> CapacityBlock | None:
    """The block a launched set runs on, kept past the set's release (see `block_window`)."""
    reservation_id = view.spec.capacity_reservation_id
    if result.block_ends_at is None or not reservation_id:
        return None
    return CapacityBlock(reservation_id=reservation_id, ends_at=result.block_ends_at)


def _launch_outcome(view: AnyView, status: GangNodePoolStatus, result: ActionResult) -> Outcome:
    n = view.spec.count
    if result.ok:
        marker = status.launch_in_progress  # a launch that ran was marked (`plan_acquiring`)
        assert marker is not None
        return (
            changed(
                status,
                phase=Phase.JOINING,
                instance_ids=result.instance_ids,
                active_group=marker.group,
                ready_nodes=0,
                launch_in_progress=None,
                acquire_generation=status.acquire_generation + 1,
                consecutive_shortfalls=0,
                consecutive_unknown_errors=0,
                consecutive_failures=0,
                capacity_block_ends_at=result.block_ends_at,
                capacity_block=_block_of(view, result) or status.capacity_block,
                join_deadline=view.now + view.timings.join_deadline,
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
    kind = result.failure
    err = _failure(result, Action.LAUNCH, c.EventReason.LAUNCH_FAILED)
    status = _keep_unreleased(view, status, result.unreleased_ids, result.rolled_back_ids)
    if kind in _SHORTFALLS:
        # Retried at once: the account's launch budget paces the retries (`launch_turns`).
        # The attempts that count toward `acquireAttemptsBeforeRetry` (and are said in an
        # Event) keep retryBackoff's schedule, so a Workload holds its quota as long as it
        # did when each attempt waited that long.
        status = changed(
            status,
            launch_in_progress=None,
            acquire_generation=status.acquire_generation + 1,
            consecutive_unknown_errors=0,
            last_error=err,
        )
        if not _counts(view, status):
            return status, 0.0, ()
        shortfalls = status.consecutive_shortfalls + 1
        return (
            changed(status, consecutive_shortfalls=shortfalls, last_shortfall_time=view.now),
            0.0,
            (
                Event(
                    c.EVENT_WARNING,
                    c.EventReason.CAPACITY_SHORTFALL,
                    f"Attempt {shortfalls}: {err.message} "
                    "Nothing is running; the whole gang will be retried.",
                ),
            ),
        )
    if kind is FailureKind.NOT_ACTIVE:
        # The reservation has not started: nothing was asked of EC2, so the generation stays
        # and no shortfall is counted (the Workload keeps its quota and stays Pending).
        starts = result.starts_at
        wait = view.timings.config_delay if starts is None else seconds_until(view.now, starts)
        return (
            changed(status, launch_in_progress=None, last_error=err),
            wait,
            (Event(c.EVENT_NORMAL, err.reason, err.message),),
        )
    if kind is FailureKind.NOT_PREPARED:
        # A resource of the pool's stack is missing from EC2: see `drift_outcome`.
        return drift_outcome(view, status, result, err)
    if kind is FailureKind.RETRYABLE:
        # Keep the marker: the same ClientToken is replayed, so a launch that did happen
        # is returned rather than repeated.
        # Throttled: the launch budget shrank and gives the pool its next turn.
        failures = status.consecutive_failures + 1
        return (
            changed(status, last_error=err, consecutive_failures=failures),
            0.0 if result.throttled else view.timings.backoff(failures + 1),
            (Event(c.EVENT_WARNING, err.reason, err.message),),
        )
    if kind is FailureKind.UNKNOWN:
        # A code the catalogue lacks: replayed with the same token like a transient failure
        # (it may have launched), but counted, so the Workload's check goes to Retry after
        # `unknownErrorAttemptsBeforeRetry` of them instead of holding quota forever.
        failures = status.consecutive_failures + 1
        unknown = status.consecutive_unknown_errors + 1
        return (
            changed(
                status,
                last_error=err,
                consecutive_failures=failures,
                consecutive_unknown_errors=unknown,
            ),
            view.timings.backoff(failures + 1),
            (
                Event(
                    c.EVENT_WARNING,
                    c.EventReason.UNKNOWN_AWS_ERROR,
                    f"Attempt {unknown}: {err.message}",
                ),
            ),
        )
    # Configuration: nothing was launched; the user must fix something. The generation
    # stays (no request reached a terminal result) and the marker is cleared.
    return (
        changed(status, launch_in_progress=None, last_error=err),
        view.timings.config_delay,
        (Event(c.EVENT_WARNING, err.reason, err.message),),
    )


def _counts(view: AnyView, status: GangNodePoolStatus) -> bool:
    """Whether this shortfall counts as an attempt: the first of an acquisition does, and
    each one after waits as long after the last counted as retryBackoff says."""
    last = status.last_shortfall_time
    if status.consecutive_shortfalls == 0 or last is None:
        return True
    wait = view.timings.backoff(status.consecutive_shortfalls)
    return (view.now - last).total_seconds() >= wait


def _keep_unreleased(
    view: AnyView,
    status: GangNodePoolStatus,
    unconfirmed: tuple[str, ...],
    rolled_back: tuple[str, ...],
) -> GangNodePoolStatus:
    """A rollback leaves every id it touched in `releaseInProgress`, and the next pass
    releases them (as strays, by id): what EC2 has not shown terminating is terminated
    again, and the ENIs of what it has are deleted once detached (a node may have joined
    before the rollback; see ``provisioner.cloud.rollback``). A crash before that loses
    nothing."""
    ids = tuple(dict.fromkeys([*unconfirmed, *rolled_back]))
    if not ids:
        return status
    held = status.release_in_progress
    if held is None:
        reason = c.EventReason.ROLLBACK_UNCONFIRMED if unconfirmed else c.EventReason.ROLLED_BACK
        return changed(
            status,
            release_in_progress=ReleaseInProgress(
                started_at=view.now, reason=reason, instance_ids=ids
            ),
        )
    merged = tuple(dict.fromkeys([*held.instance_ids, *ids]))
    return changed(status, release_in_progress=held.model_copy(update={"instance_ids": merged}))
