"""The GangNodePool life cycle's next step: `plan(view)`, a pure function.

`plan` looks at one pool as a pass observed it (`PoolView`: spec, status, what EC2 and the
Nodes show for it, the time, and the stack's and the launch facts' answers where its phase's
row reads them) and names ONE step: an action with an external effect (prepare the stack,
launch, record the set in the stack, release a set, destroy the stack, mirror keep-warm to
EC2) or a plain status change. What that step's result leaves is `outcomes`'.

The reconciler persists the step's status before acting, so every external effect is
bracketed: a marker persisted before it (for a launch: the ClientToken and group), the
result persisted right after. A crash anywhere leaves either the marker, which the next
pass resumes with the same token, or the result.

This module holds what comes before and around a phase's own planner: the strays' release,
the backoff, the wait beside a running stack operation. Each phase's planner is the one its
row in `phases.PHASES` names: `plan_acquire` (Idle, Acquiring), `plan_held` (Joining,
Satisfied, KeepWarm), `plan_release` (Releasing, and a pool being deleted).

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

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.controllers.pool.phases import row_of
from provisioner.controllers.pool.plan_release import release_marker
from provisioner.controllers.pool.status import changed
from provisioner.controllers.pool.steps import (
    Action,
    AnyView,
    Event,
    ReleasePurpose,
    Step,
)


def plan(view: AnyView) -> Step:
    step = _backing_off(view, _plan(view))
    if view.stack_operation is None:
        return step
    return _beside_stack_operation(view, step, view.stack_operation)


def _backing_off(view: AnyView, step: Step) -> Step:
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


def _beside_stack_operation(view: AnyView, step: Step, running: Action) -> Step:
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


def _plan(view: AnyView) -> Step:
    """The strays first, then the planner of the pool's row (`phases.row_of`), which the
    pass gathered this view for. A deleted pool's release takes the strays with it."""
    row = row_of(view.status, deleting=view.deleting)
    strays = () if view.deleting else _strays(view)
    if strays:
        reason, event = _stray_release(view, strays)
        return Step(
            Action.RELEASE_SET,
            changed(view.status, release_in_progress=release_marker(view, reason, strays)),
            release_ids=strays,
            events=(event,),
            release_purpose=ReleasePurpose.STRAYS,
            why="strays",
        )
    return row.plan(view)


def _strays(view: AnyView) -> tuple[str, ...]:
    """Live instances of this pool that neither the active set nor an in-flight launch owns,
    and the ids a release (or a launch's rollback) has not yet seen go, which the set does
    not own either: EC2's listing may not show those, so they are released by id.

    `view.live` holds only instances the pool may release: the pass left out those that
    carry its tags but that EC2's record does not prove ours (`pool.proofs`; DESIGN §11),
    which it reports instead (`view.unproven`)."""
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


def _stray_release(view: AnyView, strays: tuple[str, ...]) -> tuple[str, Event]:
    """Why the strays are released, and what the pool says about it. When they are all ids
    a launch's rollback left (see `outcomes._keep_unreleased`), the rollback's reason
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
