"""GangNodePool reconciler's loop: observe, plan, persist, act (or submit), settle.

Watches: GangNodePools, and Nodes carrying the pool label (mapped to their pool).
Writes, alone: `GangNodePool.status`, all EC2 lifecycle of the pool's instances, the pool's
Pulumi stack, the group label of its own Nodes, and the finalizer's removal. The effects
themselves are `actions`'; this module decides when they run and saves what they left.
Every status it saves carries the conditions (Ready, Progressing, Degraded) and the
observedGeneration `conditions.observed` derives from it, so nothing else writes them.

Each pass observes, reading only (the pool, its live instances in EC2 found by tag, its
Ready Nodes and what keeps any of them from running a gang pod (`usable`), and the facts
its plan and action need: the stack's outputs, the cluster, AMI, instance type, reservation
and subnet plan, each read once and only where the row of the pool's phase in `phases`
says; see `_read_facts`), asks `plan.plan` for ONE step, persists that step's status (for
a launch: the marker with the generation and the ClientTokens the launch sends; a launch
first waits for its turn at the account's launch budget, and the keep-warm tag for its turn
at the CreateTags budget, `launch_turns`) before acting,
performs the action, and persists what `outcomes.outcome` makes of the result; then it
gives the active set's Nodes the group label they lack (`set_nodes.label_set_nodes`). The work
queue runs one pass per pool at a time, so a pool can never launch twice concurrently; the
launch marker and ClientToken make a crash at any point resume rather than repeat.

Stack steps (prepare, record, release a set, destroy) are handed to the `StackExecutor`
instead of run here: the pass persists the step's status, submits, and returns. While the
operation runs, passes of the pool still observe and write plain status changes, and plan
nothing that touches the stack (`plan` makes such steps wait). When it ends, the executor
queues the pool; that pass persists what `outcomes.settle` makes of the result on
the status as it is then, and nothing else. A record that waits its turn (records go after
every prepare) does not hold its pool: the pool is planned as without it (the keep-warm
tag goes ahead beside it), and another stack step withdraws it from the queue
(`steps.GIVES_WAY`).

What EC2 holds for the pool comes from the shared `InstanceIndex`: a pool about to act on
its instances (`phases.reads_fresh`) lists them on every pass; a joining or settled pool reads
the index, at most `instanceIndexRefreshSeconds` old, unless that misses part of its set. A
launch, a release and a destroy each make the pool's next read fresh (`InstanceIndex.forget`),
as the reaper's terminations do.

A failed step's wait (`Backoff`) is remembered here, in memory, and handed to `plan` with the
view: the status write that records a failure wakes the pool at once, and the step must
not run again before the wait its result asked for. So is the keep-warm window last written
onto each pool's tag: a listing from before the write does not make the plan write it again.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePool, GangNodePoolStatus
from provisioner.api.nodes import Node
from provisioner.cloud.errors import CloudError
from provisioner.cloud.views import LIVE_STATES
from provisioner.controllers.instance_index import GONE_STATES
from provisioner.controllers.pool import launch_turns
from provisioner.controllers.pool.actions import PoolActions
from provisioner.controllers.pool.conditions import observed
from provisioner.controllers.pool.deps import PoolReconcilerDeps
from provisioner.controllers.pool.facts import (
    LaunchFacts,
    PassFacts,
    StackAnswer,
    capacity_block_of,
    gather_launch_facts,
    launch_tokens,
    stack_holds_what_launch_needs,
)
from provisioner.controllers.pool.outcomes import outcome, settle
from provisioner.controllers.pool.phases import may_launch, needs_stack, reads_fresh
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.proofs import PoolProofs
from provisioner.controllers.pool.purchase import launch_shape, newly_bought, read_purchase
from provisioner.controllers.pool.set_nodes import label_set_nodes, set_ready_nodes, unusable_nodes
from provisioner.controllers.pool.stack_executor import Finished, Operation
from provisioner.controllers.pool.steps import (
    GIVES_WAY,
    NOT_FETCHED,
    STACK_ACTIONS,
    Action,
    ActionResult,
    AnyView,
    Backoff,
    Event,
    Instance,
    LaunchRead,
    NotFetched,
    PoolTimings,
    PoolView,
    StackRead,
    Step,
)
from provisioner.kube.errors import KubeConflict
from provisioner.kube.events import InvolvedObject
from provisioner.kube.own_writes import WAIT_FOR_OWN_WRITE_SECONDS, OwnWrites
from provisioner.kube.resources import GANG_NODE_POOLS, ObjectKey
from provisioner.kube.status import read_object, update_status
from provisioner.kube.workqueue import Result
from provisioner.pulumi_driver.port import StackError

log = logging.getLogger(__name__)


def _next_pass(
    before: GangNodePoolStatus, after: GangNodePoolStatus, requeue_after: float | None
) -> float | None:
    """When to look at the pool again: at once means "when our write comes back".

    A pass that wrote the status is run again by its own write's watch event, from a cache
    that holds the write; an immediate requeue would plan from the cache before it (and meet
    a conflict). So it waits for that event; the short requeue only stands in for an event
    that never comes.
    """
    if requeue_after == 0.0 and after != before:
        return WAIT_FOR_OWN_WRITE_SECONDS
    return requeue_after


class GangNodePoolReconciler:
    def __init__(self, deps: PoolReconcilerDeps) -> None:
        self._deps = deps
        self._kube = deps.kube
        self._pools = deps.pools
        self._nodes = deps.nodes
        self._index = deps.index
        self._executor = deps.executor
        self._recorder = deps.recorder
        self._now = deps.now
        self._metrics = deps.metrics
        self._timings = PoolTimings.from_settings(deps.settings)
        self._actions = PoolActions(deps)
        self._proofs = PoolProofs(
            deps.engine, deps.settings.cluster_name, deps.ownership_key, deps.recorder
        )
        # Each pool's last failed step and when it may run again. In memory only: a new
        # leader tries once at once, then backs off from the count kept in the status.
        self._backoffs: dict[str, Backoff] = {}
        # Per pool, the versions this reconciler wrote over that the cache still may show.
        self._own_writes = OwnWrites()
        # Per pool, the keep-warm window last written onto its set's tag (`keep_warm_tag_owed`).
        self._keep_warm_tagged: dict[str, datetime] = {}

    def keys_for_node(self, node: Node) -> list[ObjectKey]:
        pool = node.labels.get(c.POOL_LABEL)
        return [ObjectKey("", pool)] if pool else []

    # -- one pass -----------------------------------------------------------------------------
    def reconcile(self, key: ObjectKey) -> Result:
        pool = self._pools.get("", key.name)
        if pool is None:
            self._executor.forget(key.name)
            now = self._now()
            self._deps.budget.forget(key.name, now)
            self._deps.tag_budget.forget(key.name, now)
            self._keep_warm_tagged.pop(key.name, None)
            self._backoffs.pop(key.name, None)
            self._own_writes.forget(key.name)
            self._proofs.forget(key.name)
            return Result()
        if self._cache_behind_own_write(pool):
            # Our write's watch event wakes the pool when the cache has it; this is the
            # fallback should that event be lost.
            return Result(requeue_after=WAIT_FOR_OWN_WRITE_SECONDS)
        held = self._executor.state(pool.name)
        pending = held.pending.step.action if held.pending else None
        # A queued record gives way: the pool is planned as if it were not there, and it is
        # withdrawn if the plan needs another stack step (`_plan_and_act`).
        queued = pending if pending in GIVES_WAY and not held.started else None
        view, facts = self._observe(
            pool, None if queued else pending, settling=held.finished is not None
        )
        if held.finished is not None:
            result = self._settle(pool, view, held.finished)
        else:
            result = self._plan_and_act(pool, view, facts, queued)
        label_set_nodes(self._kube, self._nodes, pool.name, view)
        self._proofs.report(pool, view.unproven)
        return result

    def _plan_and_act(
        self, pool: GangNodePool, view: AnyView, facts: PassFacts, queued: Action | None
    ) -> Result:
        step = plan(view)
        if queued is not None:
            if step.action is queued:  # it is queued already: only the status is written
                step = replace(step, action=Action.NONE, why=f"{queued.value} queued")
            elif step.action in STACK_ACTIONS and not self._executor.withdraw(pool.name, step):
                return Result()  # it started: its end queues the pool again
        if step.action is Action.TAG_KEEP_WARM:
            tag = launch_turns.tag_turn(self._deps.tag_budget, view)
            if not tag.go:  # its turn at the CreateTags budget comes later
                return Result(requeue_after=tag.wait)
        else:  # claimed again, or going, before its turn: the turn is given back
            launch_turns.no_tag(self._deps.tag_budget, view)
        turn = launch_turns.ask(self._deps.budget, view) if step.action is Action.LAUNCH else None
        if turn is not None and not turn.go:  # its turn at the launch budget comes later
            return Result(requeue_after=turn.wait)
        if turn is None:
            return self._act(pool, view, facts, step, launching=False)
        try:
            return self._act(pool, view, facts, step, launching=True)
        finally:
            # A pass that failed before its launch was settled (a conflict writing the
            # marker) gives its hold back; after `settle` this does nothing.
            launch_turns.abandon(self._deps.budget, view)

    def _act(
        self, pool: GangNodePool, view: AnyView, facts: PassFacts, step: Step, launching: bool
    ) -> Result:
        if step.action is not Action.NONE or step.status.phase != view.status.phase:
            log.info(
                "pool %s: %s -> %s, %s",
                pool.name,
                view.status.phase,
                step.status.phase,
                step.action.value,
                extra={"pool": pool.name, "generation": step.status.acquire_generation}
                | {"phase": step.status.phase, "action": step.action.value},
            )
        written = self._persist(pool, step.status)
        if step.action in STACK_ACTIONS:
            return self._submit(step, pool, view, facts, written)
        result = self._actions.run(step, pool, facts, written)
        if result is None:
            self._emit(written, step.events)
            self._observe_metrics(pool, view.status, step.status)
            return Result(requeue_after=_next_pass(view.status, step.status, step.requeue_after))
        status, requeue, events = outcome(view, step, result)
        self._note_backoff(pool.name, step.action, result, requeue)
        if launching:
            launch_turns.settle(self._deps.budget, view, result)
        if step.action is Action.TAG_KEEP_WARM:
            launch_turns.tag_settled(self._deps.tag_budget, view, result)
            if result.ok and step.status.keep_warm_until is not None:
                self._keep_warm_tagged[pool.name] = step.status.keep_warm_until
        if step.action is Action.REMOVE_FINALIZER:
            return Result()
        written = self._persist_result(written, status)
        self._emit(written, (*step.events, *events))
        self._observe_metrics(pool, step.status, status)
        return Result(requeue_after=_next_pass(view.status, status, requeue))

    def _submit(
        self,
        step: Step,
        pool: GangNodePool,
        view: AnyView,
        facts: PassFacts,
        written: GangNodePool,
    ) -> Result:
        """Hand a stack step to the executor; it queues the pool again when it ends."""
        operation = Operation(pool.name, step, lambda: self._run_stack_step(step, pool, facts))
        if not self._executor.submit(operation):
            # Only after step-down (the pool had nothing pending when this pass looked).
            log.info("pool %s: %s not submitted; not leading", pool.name, step.action.value)
            return Result()
        self._emit(written, step.events)
        self._observe_metrics(pool, view.status, step.status)
        return Result()

    def _run_stack_step(self, step: Step, pool: GangNodePool, facts: PassFacts) -> ActionResult:
        result = self._actions.run(step, pool, facts, pool)  # stack steps write no object
        assert result is not None
        return result

    def _settle(self, pool: GangNodePool, view: AnyView, finished: Finished) -> Result:
        """Persist a finished stack operation's result, then let the executor drop it."""
        step = finished.operation.step
        status, requeue, events = settle(view, step, finished.result)
        self._note_backoff(pool.name, step.action, finished.result, requeue)
        log.info(
            "pool %s: stack %s %s",
            pool.name,
            step.action.value,
            "succeeded" if finished.result.ok else f"failed: {finished.result.reason}",
            extra={"pool": pool.name, "phase": status.phase, "action": step.action.value},
        )
        written = self._persist_result(pool, status)
        self._executor.consumed(finished)
        self._emit(written, events)
        self._observe_metrics(pool, view.status, status)
        return Result(requeue_after=_next_pass(view.status, status, requeue))

    def _note_backoff(
        self, pool: str, action: Action, result: ActionResult, requeue: float | None
    ) -> None:
        """Remember how long a failed step waits; any step that succeeds ends the wait."""
        if result.ok:
            self._backoffs.pop(pool, None)
        elif requeue:
            until = self._now() + timedelta(seconds=requeue)
            self._backoffs[pool] = Backoff(action, until)

    def _observe(
        self, pool: GangNodePool, stack_operation: Action | None, settling: bool = False
    ) -> tuple[AnyView, PassFacts]:
        """What the pass plans from: the pool's instances in EC2, its Ready Nodes, and the
        stack's and the world's answers where its plan and its action need them (each read
        once; see `_read_facts`)."""
        status = pool.status
        # One paged read of the pool's instances in every state says both what runs and
        # which of the status's IDs EC2 reports gone. An ID absent from it is not gone (EC2
        # lists a fresh launch late); its Node not joining is what the join deadline is for.
        # A pass while the pool's stack operation runs, or the pass that writes its result,
        # acts on no instance (it waits, or saves what the operation did), so the index
        # serves it; the pass after, which may act, lists EC2 if its phase says so.
        if reads_fresh(pool) and stack_operation is None and not settling:
            seen = self._index.read_fresh(pool.name)
        else:
            seen = self._index.read(pool.name)
            if not set(status.instance_ids) <= {v.instance_id for v in seen}:
                # The listing predates the launch, or EC2 listed the launch late: the set is
                # judged on what EC2 says of every member now.
                seen = self._index.read_fresh(pool.name)
        # Tags only index: what no set of the pool holds is released only once EC2's
        # record proves it ours (DESIGN §11); the rest stays out of `live`, reported.
        live, unproven = self._proofs.releasable(pool, [v for v in seen if v.state in LIVE_STATES])
        owned = set(status.instance_ids)
        gone = frozenset(
            v.instance_id for v in seen if v.instance_id in owned and v.state in GONE_STATES
        )
        ready_nodes = set_ready_nodes(self._nodes, pool.name, status, {v.instance_id for v in live})
        ready = frozenset(ready_nodes)
        unusable = unusable_nodes(pool, ready_nodes.values(), self._deps.settings.startup_taints)
        facts = self._read_facts(pool, stack_operation, settling)
        launch = facts.launch
        view = PoolView(
            name=pool.name,
            uid=pool.metadata.uid or pool.name,
            spec=pool.spec,
            status=status,
            deleting=pool.metadata.deletion_timestamp is not None,
            has_finalizer=c.FINALIZER in pool.metadata.finalizers,
            live=tuple(
                Instance(v.instance_id, v.managed.group, v.managed.keep_warm_until) for v in live
            ),
            gone_ids=gone,
            ready_instance_ids=ready,
            now=self._now(),
            timings=self._timings,
            # What the row of the pool's phase reads, and nothing else (see `phases`).
            stack=self._stack_read(pool, stack_operation, settling, facts),
            launch=(
                NOT_FETCHED
                if launch is None
                else LaunchRead(
                    capacity_block_of(launch),
                    launch_tokens(self._deps.engine, self._deps.settings, pool, launch),
                    facts.purchase,
                )
            ),
            stack_operation=stack_operation,
            backoff=self._backoffs.get(pool.name),
            unusable=unusable,
            unproven=unproven,
            keep_warm_tagged=self._keep_warm_tagged.get(pool.name),
        )
        return view, facts

    def _read_facts(
        self, pool: GangNodePool, stack_operation: Action | None, settling: bool
    ) -> PassFacts:
        """The stack's outputs, for a plan that reads them (`needs_stack`), and the cluster,
        AMI, instance type and reservation, for a pass that may prepare or launch, with the
        subnet plan unless the stack holds nothing yet (that pass prepares, not launches).

        Neither is read while the pool's stack operation runs (the answer would wait for
        its lock, and every step that reads them waits for it anyway), nor by the pass that
        saves a finished operation's result (it plans nothing).
        """
        if stack_operation is not None or settling:
            return PassFacts()
        settings = self._deps.settings
        stack = None
        if needs_stack(
            pool.spec, pool.status, deleting=pool.metadata.deletion_timestamp is not None
        ):
            try:
                outputs = self._deps.stacks.outputs(pool.name)
                partial = outputs is None and self._deps.stacks.holds(pool.name)
                stack = StackAnswer(outputs, partial=partial)
            except StackError as err:
                stack = StackAnswer(None, err)
        launch: LaunchFacts | CloudError | None = None
        if may_launch(pool):
            unprepared = stack is not None and stack.outputs is None and stack.error is None
            try:
                launch = gather_launch_facts(
                    self._deps.engine, settings, launch_shape(pool), with_subnets=not unprepared
                )
            except CloudError as err:
                launch = err
            purchase = read_purchase(self._deps.engine, settings, pool, self._now())
            return PassFacts(stack=stack, launch=launch, purchase=purchase)
        return PassFacts(stack=stack, launch=launch)

    def _stack_read(
        self,
        pool: GangNodePool,
        stack_operation: Action | None,
        settling: bool,
        facts: PassFacts,
    ) -> StackRead | NotFetched:
        if facts.stack is not None:
            return StackRead(
                stack_holds_what_launch_needs(self._deps.settings, pool, facts.stack, facts.launch),
                partial=facts.stack.partial,
            )
        deleting = pool.metadata.deletion_timestamp is not None
        if (
            stack_operation is not None
            and not settling
            and needs_stack(pool.spec, pool.status, deleting=deleting)
        ):
            # Not asked: every step that reads it waits for the operation.
            return StackRead(prepared=False)
        return NOT_FETCHED

    # -- writes ---------------------------------------------------------------------------------
    def _persist(
        self, pool: GangNodePool, after: GangNodePoolStatus, planned: GangNodePool | None = None
    ) -> GangNodePool:
        """Write `after` over `pool`'s status unless the pool already holds exactly that.

        What is written carries the conditions and observedGeneration `after` implies for the
        pool the pass `planned` from (its spec and generation; by default `pool` itself), so
        a pass that changes nothing, on a generation already answered, writes nothing.
        """
        basis = planned or pool
        after = observed(after, basis.spec, basis.metadata.generation, self._now())
        if after == pool.status:
            return pool
        written = update_status(self._kube, GANG_NODE_POOLS, pool, after, c.FIELD_MANAGER)
        self._own_writes.wrote(pool.name, pool, written)
        return written

    def _cache_behind_own_write(self, pool: GangNodePool) -> bool:
        """Whether the informer still holds a version of the pool this reconciler wrote over.

        The watch event of one write (a launch marker) can queue the pool while the next
        write (the launch's IDs) is still on its way to the cache; a pass planned from the
        older object would launch again (the ClientToken makes EC2 answer with the same
        instances, but it is a call, and a conflict, for nothing) or redo any other step.
        (See `OwnWrites`.)
        """
        if self._own_writes.cache_behind(pool.name, pool):
            log.debug("pool %s: cache behind our own write; waiting for it", pool.name)
            return True
        return False

    def _persist_result(self, pool: GangNodePool, after: GangNodePoolStatus) -> GangNodePool:
        """Persist what an action left, even if the pool's spec or metadata moved meanwhile.

        The action has happened (a `pulumi up`, a launch); dropping its result on a conflict
        would make the next pass do it again, and a steady writer of labels or annotations
        could keep the pool from ever moving on. This reconciler alone writes status, so if
        the fresh object's status is still the one the action started from, the result is
        applied on top of it; if status itself changed, the conflict stands and the pool is
        planned again.
        """
        try:
            return self._persist(pool, after)
        except KubeConflict:
            name = pool.name
            fresh = read_object(self._kube, GANG_NODE_POOLS, name, None, GangNodePool.from_dict)
            if fresh.status != pool.status:
                raise
            log.info(
                "gangnodepool %s: conflict saving an action's result; re-applied on the fresh one",
                name,
            )
            # The version the action was planned from is written over as well.
            written = self._persist(fresh, after, planned=pool)
            self._own_writes.wrote(name, pool, written)
            return written

    def _emit(self, pool: GangNodePool, events: tuple[Event, ...]) -> None:
        involved = InvolvedObject.of(GANG_NODE_POOLS, pool.metadata)
        for event in events:
            self._recorder.record(involved, event.type, event.reason, event.message)

    def _observe_metrics(
        self, pool: GangNodePool, before: GangNodePoolStatus, after: GangNodePoolStatus
    ) -> None:
        for bought in newly_bought(before, after):
            self._metrics.block_fees.labels(pool=pool.name).inc(float(bought.upfront_fee))
        if before.phase != after.phase and after.phase == Phase.SATISFIED:
            claim = pool.spec.claim
            if claim is not None:
                waited = (self._now() - claim.claimed_at).total_seconds()
                self._metrics.time_to_ready.labels(
                    mode=pool.spec.mode, instance_type=pool.spec.instance_type
                ).observe(max(waited, 0.0))
